//! Layer 3: the optional features a flow or a packet may pass through. QoS ([`qos`], with the
//! queueing core of its shaper in [`shaper`]), the
//! per-host meters ([`meter`]), content blocking ([`content`], with its parsers in
//! [`inspect`] and the schedules of [`parental`] control). Each is a self-contained engine
//! the pipeline calls; none calls back into it.

pub mod content;
pub mod inspect;
pub mod meter;
pub mod parental;
pub mod qos;
pub mod shaper;
