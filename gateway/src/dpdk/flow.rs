//! rte_flow rules that steer NAT replies to the worker owning their flow: `ETH / IPV4
//! dst=<NAT address> / TCP|UDP dst_port & mask == class -> QUEUE owner`. On the X550 these
//! are flow director rules in perfect mode (all rules share one mask; priority 0). Devices
//! that refuse them leave the work to the handoff rings.

use std::ffi::{c_void, CStr};
use std::net::Ipv4Addr;
use std::sync::Arc;

use super::error::{DpdkError, Result};
use super::ids::RxQueueId;
use super::port::{Port, PortInner};

/// A rule installed on a port; destroyed when dropped, and keeping the port open until then.
pub struct FlowRule {
    port: Arc<PortInner>,
    flow: *mut dpdk_sys::rte_flow,
}

// SAFETY: the handle is only used to destroy the rule, from whichever thread drops it; DPDK
// serialises flow operations per port internally.
unsafe impl Send for FlowRule {}

impl Drop for FlowRule {
    fn drop(&mut self) {
        let mut error = dpdk_sys::rte_flow_error::default();
        // SAFETY: the rule was created on this port, which is still open (we hold it), and is
        // destroyed once.
        unsafe { dpdk_sys::rte_flow_destroy(self.port.id().0, self.flow, &mut error) };
    }
}

/// Steers packets to `dst` whose destination port matches `class` under `mask` to `queue`.
/// Validated first, so a refusal changes nothing; the error carries the driver's reason.
pub fn steer_port_class(
    port: &Port,
    dst: Ipv4Addr,
    protocol: u8,
    class: u16,
    mask: u16,
    queue: RxQueueId,
) -> Result<FlowRule> {
    if queue.0 >= port.rx_queues() {
        return Err(DpdkError::Invalid {
            what: "flow rule",
            detail: format!("{} has no {queue}", port.name()),
        });
    }
    let owner = port.owner();
    let port_id = port.id();
    let mut attr = dpdk_sys::rte_flow_attr::default();
    attr.set_ingress(1);

    let mut ip_spec = dpdk_sys::rte_flow_item_ipv4::default();
    let mut ip_mask = dpdk_sys::rte_flow_item_ipv4::default();
    ip_spec.hdr.dst_addr = u32::from(dst).to_be();
    ip_mask.hdr.dst_addr = u32::MAX;
    let mut tcp_spec = dpdk_sys::rte_flow_item_tcp::default();
    let mut tcp_mask = dpdk_sys::rte_flow_item_tcp::default();
    let mut udp_spec = dpdk_sys::rte_flow_item_udp::default();
    let mut udp_mask = dpdk_sys::rte_flow_item_udp::default();
    let (l4_type, l4_spec, l4_mask): (_, *const c_void, *const c_void) = match protocol {
        6 => {
            tcp_spec.hdr.dst_port = class.to_be();
            tcp_mask.hdr.dst_port = mask.to_be();
            (
                dpdk_sys::RTE_FLOW_ITEM_TYPE_TCP,
                &tcp_spec as *const _ as *const c_void,
                &tcp_mask as *const _ as *const c_void,
            )
        }
        17 => {
            udp_spec.hdr.dst_port = class.to_be();
            udp_mask.hdr.dst_port = mask.to_be();
            (
                dpdk_sys::RTE_FLOW_ITEM_TYPE_UDP,
                &udp_spec as *const _ as *const c_void,
                &udp_mask as *const _ as *const c_void,
            )
        }
        _ => {
            return Err(DpdkError::Invalid {
                what: "flow rule",
                detail: format!("protocol {protocol} has no ports to steer by"),
            })
        }
    };
    let item = |type_, spec: *const c_void, mask: *const c_void| dpdk_sys::rte_flow_item {
        type_,
        spec,
        last: std::ptr::null(),
        mask,
    };
    let pattern = [
        item(
            dpdk_sys::RTE_FLOW_ITEM_TYPE_ETH,
            std::ptr::null(),
            std::ptr::null(),
        ),
        item(
            dpdk_sys::RTE_FLOW_ITEM_TYPE_IPV4,
            &ip_spec as *const _ as *const c_void,
            &ip_mask as *const _ as *const c_void,
        ),
        item(l4_type, l4_spec, l4_mask),
        item(
            dpdk_sys::RTE_FLOW_ITEM_TYPE_END,
            std::ptr::null(),
            std::ptr::null(),
        ),
    ];
    let to_queue = dpdk_sys::rte_flow_action_queue { index: queue.0 };
    let actions = [
        dpdk_sys::rte_flow_action {
            type_: dpdk_sys::RTE_FLOW_ACTION_TYPE_QUEUE,
            conf: &to_queue as *const _ as *const c_void,
        },
        dpdk_sys::rte_flow_action {
            type_: dpdk_sys::RTE_FLOW_ACTION_TYPE_END,
            conf: std::ptr::null(),
        },
    ];
    let mut error = dpdk_sys::rte_flow_error::default();
    // SAFETY: attr, pattern and actions are valid, END-terminated and outlive the call;
    // validation changes nothing on the device.
    let ret = unsafe {
        dpdk_sys::rte_flow_validate(
            port_id.0,
            &attr,
            pattern.as_ptr(),
            actions.as_ptr(),
            &mut error,
        )
    };
    if ret != 0 {
        return Err(flow_error("rte_flow_validate", ret, &error));
    }
    // SAFETY: as above; the driver copies what it needs.
    let flow = unsafe {
        dpdk_sys::rte_flow_create(
            port_id.0,
            &attr,
            pattern.as_ptr(),
            actions.as_ptr(),
            &mut error,
        )
    };
    if flow.is_null() {
        return Err(flow_error("rte_flow_create", -1, &error));
    }
    Ok(FlowRule { port: owner, flow })
}

fn flow_error(call: &'static str, ret: i32, error: &dpdk_sys::rte_flow_error) -> DpdkError {
    let message = if error.message.is_null() {
        DpdkError::from_errno(call, ret).to_string()
    } else {
        // SAFETY: the driver sets message to a static NUL-terminated string.
        unsafe { CStr::from_ptr(error.message) }
            .to_string_lossy()
            .into_owned()
    };
    DpdkError::Invalid {
        what: call,
        detail: message,
    }
}
