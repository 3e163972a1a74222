//! Parental control: per-device policies with blocked content categories, allowed time
//! windows and a pause switch.
//!
//! Content categories are matched elsewhere: a policy only names them by index into the
//! matchers its caller builds. Time is passed in as a local weekday and minute, which
//! [`LocalTime`] computes from unix seconds and a UTC offset, so this module never reads a
//! clock and needs no time-zone database (the caller supplies the offset in force,
//! daylight-saving time included).

use std::net::Ipv4Addr;

use crate::wire::EthernetAddress;

pub const MINUTES_PER_DAY: u16 = 24 * 60;

/// Weekday bits for [`TimeWindow::weekdays`]; weekday numbers are 0 (Monday) to 6 (Sunday).
pub mod days {
    pub const MONDAY: u8 = 1 << 0;
    pub const TUESDAY: u8 = 1 << 1;
    pub const WEDNESDAY: u8 = 1 << 2;
    pub const THURSDAY: u8 = 1 << 3;
    pub const FRIDAY: u8 = 1 << 4;
    pub const SATURDAY: u8 = 1 << 5;
    pub const SUNDAY: u8 = 1 << 6;
    pub const WORKDAYS: u8 = MONDAY | TUESDAY | WEDNESDAY | THURSDAY | FRIDAY;
    pub const WEEKEND: u8 = SATURDAY | SUNDAY;
    pub const EVERY_DAY: u8 = WORKDAYS | WEEKEND;
}

/// How a device is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceMatch {
    Ip(Ipv4Addr),
    Mac(EthernetAddress),
}

/// A weekly recurring window, `[start_minute, end_minute)` in local time, starting on each
/// day in `weekdays`.
///
/// A window whose end is not after its start crosses midnight: it starts on a listed day
/// and ends on the next day, listed or not (Friday 22:00 to 02:00 covers the first two
/// hours of Saturday). So `start == end` is a full 24 hours from `start`. Minutes above
/// [`MINUTES_PER_DAY`] count as the day's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindow {
    pub weekdays: u8,
    pub start_minute: u16,
    pub end_minute: u16,
}

impl TimeWindow {
    /// Whether local `weekday` (0 = Monday) at `minute` (0..1440) falls inside. Out-of-range
    /// input is inside no window: for an access control, not knowing the time must not
    /// grant access.
    pub fn contains(&self, weekday: u8, minute: u16) -> bool {
        if weekday > 6 || minute >= MINUTES_PER_DAY {
            return false;
        }
        let start = self.start_minute.min(MINUTES_PER_DAY);
        let end = self.end_minute.min(MINUTES_PER_DAY);
        let starts_today = self.weekdays & (1 << weekday) != 0;
        let started_yesterday = self.weekdays & (1 << ((weekday + 6) % 7)) != 0;
        if start < end {
            starts_today && (start..end).contains(&minute)
        } else {
            (starts_today && minute >= start) || (started_yesterday && minute < end)
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub devices: Vec<DeviceMatch>,
    /// Indexes into the category matchers the caller builds.
    pub blocked_categories: Vec<usize>,
    /// When access is allowed; empty means always.
    pub windows: Vec<TimeWindow>,
    /// Blocks everything until unpaused, windows or not.
    pub paused: bool,
}

impl Policy {
    pub fn blocks_category(&self, category: usize) -> bool {
        self.blocked_categories.contains(&category)
    }

    /// Whether the device may use the network at local `weekday` (0 = Monday) and `minute`.
    pub fn allowed_at(&self, weekday: u8, minute: u16) -> bool {
        !self.paused
            && (self.windows.is_empty()
                || self
                    .windows
                    .iter()
                    .any(|window| window.contains(weekday, minute)))
    }
}

/// All policies, indexed by device.
#[derive(Clone, Debug, Default)]
pub struct ParentalControl {
    policies: Vec<Policy>,
    /// Sorted for binary search: a lookup touches a few cache lines and never allocates.
    by_ip: Box<[(Ipv4Addr, usize)]>,
    by_mac: Box<[(EthernetAddress, usize)]>,
}

impl ParentalControl {
    /// Indexes `policies` by device. A device listed in several policies gets the first.
    /// Allocates: build it on configuration, not per packet.
    pub fn new(policies: Vec<Policy>) -> Self {
        let mut by_ip = Vec::new();
        let mut by_mac = Vec::new();
        for (index, policy) in policies.iter().enumerate() {
            for device in &policy.devices {
                match *device {
                    DeviceMatch::Ip(ip) => by_ip.push((ip, index)),
                    DeviceMatch::Mac(mac) => by_mac.push((mac, index)),
                }
            }
        }
        // Sorting by (device, index) puts each device's first policy first, which `dedup`
        // keeps.
        by_ip.sort_unstable();
        by_ip.dedup_by_key(|(ip, _)| *ip);
        by_mac.sort_unstable();
        by_mac.dedup_by_key(|(mac, _)| *mac);
        ParentalControl {
            policies,
            by_ip: by_ip.into_boxed_slice(),
            by_mac: by_mac.into_boxed_slice(),
        }
    }

    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The policy for the device with `ip` and, if known, `mac`. The MAC is looked up first:
    /// it stays with the device, whereas DHCP may hand the IP address a policy names to
    /// another device.
    pub fn device_policy(&self, ip: Ipv4Addr, mac: Option<EthernetAddress>) -> Option<&Policy> {
        let by_mac = mac.and_then(|mac| {
            self.by_mac
                .binary_search_by_key(&mac, |&(m, _)| m)
                .ok()
                .map(|i| self.by_mac[i].1)
        });
        let index = by_mac.or_else(|| {
            self.by_ip
                .binary_search_by_key(&ip, |&(a, _)| a)
                .ok()
                .map(|i| self.by_ip[i].1)
        })?;
        self.policies.get(index)
    }

    /// Whether `policy` allows access at local `weekday` (0 = Monday) and `minute`.
    pub fn allowed_now(&self, policy: &Policy, local_weekday: u8, local_minute: u16) -> bool {
        policy.allowed_at(local_weekday, local_minute)
    }
}

/// A local weekday (0 = Monday .. 6 = Sunday) and minute of the day (0..1440).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalTime {
    pub weekday: u8,
    pub minute: u16,
}

impl LocalTime {
    const SECONDS_PER_DAY: i64 = 86_400;
    /// 1970-01-01 was a Thursday.
    const EPOCH_WEEKDAY: i64 = 3;

    /// Local time at `unix_seconds` for a zone `utc_offset_minutes` ahead of UTC (negative
    /// west of Greenwich). Leap seconds do not exist in unix time, so days are exactly
    /// 86 400 s and this is plain arithmetic.
    pub fn from_unix(unix_seconds: i64, utc_offset_minutes: i32) -> Self {
        // i128: an extreme time plus an extreme offset must not overflow.
        let local = i128::from(unix_seconds) + i128::from(utc_offset_minutes) * 60;
        let day_seconds = i128::from(Self::SECONDS_PER_DAY);
        let days = local.div_euclid(day_seconds);
        let second_of_day = local.rem_euclid(day_seconds);
        LocalTime {
            // Both remainders are small and non-negative.
            weekday: (days + i128::from(Self::EPOCH_WEEKDAY)).rem_euclid(7) as u8,
            minute: (second_of_day / 60) as u16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::days::*;
    use super::*;

    const MON: u8 = 0;
    const THU: u8 = 3;
    const FRI: u8 = 4;
    const SAT: u8 = 5;
    const SUN: u8 = 6;

    fn at(hour: u16, minute: u16) -> u16 {
        hour * 60 + minute
    }

    fn window(weekdays: u8, start: u16, end: u16) -> TimeWindow {
        TimeWindow {
            weekdays,
            start_minute: start,
            end_minute: end,
        }
    }

    fn mac(last: u8) -> EthernetAddress {
        EthernetAddress([0x02, 0, 0, 0, 0, last])
    }

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, last)
    }

    #[test]
    fn same_day_window_is_half_open() {
        let w = window(WORKDAYS, at(16, 0), at(19, 30));
        assert!(!w.contains(MON, at(15, 59)));
        assert!(w.contains(MON, at(16, 0)));
        assert!(w.contains(FRI, at(19, 29)));
        assert!(!w.contains(FRI, at(19, 30)));
        assert!(!w.contains(SAT, at(17, 0)));
    }

    #[test]
    fn window_crossing_midnight_ends_on_the_next_day() {
        // Friday and Saturday nights, 22:00 to 01:30.
        let w = window(FRIDAY | SATURDAY, at(22, 0), at(1, 30));
        assert!(!w.contains(FRI, at(21, 59)));
        assert!(w.contains(FRI, at(22, 0)));
        assert!(w.contains(FRI, at(23, 59)));
        assert!(w.contains(SAT, at(0, 0)));
        assert!(w.contains(SAT, at(1, 29)));
        assert!(!w.contains(SAT, at(1, 30)));
        assert!(w.contains(SAT, at(23, 0)));
        // Sunday morning belongs to Saturday's night, though Sunday is not listed.
        assert!(w.contains(SUN, at(1, 0)));
        assert!(!w.contains(SUN, at(22, 0)));
        // Friday early morning would be Thursday's night, which is not listed.
        assert!(!w.contains(FRI, at(1, 0)));
        assert!(!w.contains(THU, at(23, 0)));
    }

    #[test]
    fn sunday_night_wraps_to_monday() {
        let w = window(SUNDAY, at(23, 0), at(2, 0));
        assert!(w.contains(SUN, at(23, 30)));
        assert!(w.contains(MON, at(1, 59)));
        assert!(!w.contains(MON, at(23, 30)));
    }

    #[test]
    fn equal_start_and_end_is_a_whole_day() {
        let w = window(MONDAY, 0, 0);
        assert!(w.contains(MON, 0));
        assert!(w.contains(MON, at(23, 59)));
        assert!(!w.contains(1, 0));
        let w = window(MONDAY, at(12, 0), at(12, 0));
        assert!(w.contains(MON, at(12, 0)));
        assert!(w.contains(1, at(11, 59)));
        assert!(!w.contains(1, at(12, 0)));
        assert!(!w.contains(MON, at(11, 59)));
    }

    #[test]
    fn end_of_day_and_out_of_range_input() {
        let w = window(EVERY_DAY, at(20, 0), MINUTES_PER_DAY);
        assert!(w.contains(SUN, at(23, 59)));
        assert!(!w.contains(MON, 0));
        // Ends past the day's end count as the day's end.
        assert_eq!(
            window(EVERY_DAY, at(20, 0), 5_000).contains(MON, 0),
            w.contains(MON, 0)
        );
        assert!(!w.contains(7, at(21, 0)));
        assert!(!w.contains(MON, MINUTES_PER_DAY));
        assert!(!window(0, 0, 0).contains(MON, 0));
    }

    #[test]
    fn weekday_masks_select_days() {
        let weekend = window(WEEKEND, at(9, 0), at(21, 0));
        let workdays = window(WORKDAYS, at(9, 0), at(21, 0));
        for day in 0..7 {
            assert_eq!(weekend.contains(day, at(12, 0)), day >= SAT, "day {day}");
            assert_eq!(workdays.contains(day, at(12, 0)), day < SAT, "day {day}");
        }
    }

    #[test]
    fn policy_windows_and_pause() {
        let always = Policy::default();
        assert!(always.allowed_at(MON, 0));
        let paused_always = Policy {
            paused: true,
            ..Policy::default()
        };
        assert!(!paused_always.allowed_at(MON, at(12, 0)));

        let mut homework = Policy {
            windows: vec![
                window(WORKDAYS, at(7, 0), at(8, 0)),
                window(WORKDAYS, at(17, 0), at(20, 0)),
                window(WEEKEND, at(9, 0), at(1, 0)),
            ],
            ..Policy::default()
        };
        let control = ParentalControl::new(vec![homework.clone()]);
        assert!(control.allowed_now(&homework, MON, at(7, 30)));
        assert!(!control.allowed_now(&homework, MON, at(12, 0)));
        assert!(control.allowed_now(&homework, MON, at(19, 59)));
        assert!(control.allowed_now(&homework, SUN, at(0, 30)));
        assert!(control.allowed_now(&homework, MON, at(0, 30)));
        assert!(!control.allowed_now(&homework, SAT, at(8, 59)));
        homework.paused = true;
        assert!(!control.allowed_now(&homework, MON, at(7, 30)));
    }

    #[test]
    fn blocked_categories_are_looked_up_by_index() {
        let policy = Policy {
            blocked_categories: vec![2, 5],
            ..Policy::default()
        };
        assert!(policy.blocks_category(5));
        assert!(!policy.blocks_category(3));
    }

    #[test]
    fn lookup_by_ip_and_by_mac() {
        let kids = Policy {
            devices: vec![
                DeviceMatch::Mac(mac(1)),
                DeviceMatch::Ip(ip(20)),
                DeviceMatch::Mac(mac(2)),
            ],
            blocked_categories: vec![1],
            ..Policy::default()
        };
        let guest = Policy {
            devices: vec![DeviceMatch::Ip(ip(50)), DeviceMatch::Mac(mac(9))],
            paused: true,
            ..Policy::default()
        };
        let control = ParentalControl::new(vec![kids.clone(), guest.clone()]);
        assert_eq!(control.policies().len(), 2);
        assert_eq!(control.device_policy(ip(99), Some(mac(1))), Some(&kids));
        assert_eq!(control.device_policy(ip(99), Some(mac(2))), Some(&kids));
        assert_eq!(control.device_policy(ip(20), None), Some(&kids));
        assert_eq!(control.device_policy(ip(20), Some(mac(7))), Some(&kids));
        assert_eq!(control.device_policy(ip(50), None), Some(&guest));
        assert_eq!(control.device_policy(ip(99), Some(mac(7))), None);
        assert_eq!(control.device_policy(ip(99), None), None);
        // The MAC wins over an IP address that DHCP may have handed to another device.
        assert_eq!(control.device_policy(ip(50), Some(mac(1))), Some(&kids));
        assert_eq!(control.device_policy(ip(20), Some(mac(9))), Some(&guest));
    }

    #[test]
    fn device_in_several_policies_gets_the_first() {
        let first = Policy {
            devices: vec![DeviceMatch::Ip(ip(5)), DeviceMatch::Mac(mac(5))],
            blocked_categories: vec![1],
            ..Policy::default()
        };
        let second = Policy {
            devices: vec![DeviceMatch::Mac(mac(5)), DeviceMatch::Ip(ip(5))],
            blocked_categories: vec![2],
            ..Policy::default()
        };
        let control = ParentalControl::new(vec![first.clone(), second]);
        assert_eq!(control.device_policy(ip(5), None), Some(&first));
        assert_eq!(control.device_policy(ip(1), Some(mac(5))), Some(&first));
        assert!(ParentalControl::new(Vec::new())
            .device_policy(ip(5), Some(mac(5)))
            .is_none());
    }

    #[test]
    fn local_time_from_unix_seconds() {
        let thursday_midnight = LocalTime {
            weekday: THU,
            minute: 0,
        };
        assert_eq!(LocalTime::from_unix(0, 0), thursday_midnight);
        // 2024-01-01 00:00:00 UTC, a Monday.
        let new_year = 1_704_067_200;
        assert_eq!(
            LocalTime::from_unix(new_year, 0),
            LocalTime {
                weekday: MON,
                minute: 0
            }
        );
        assert_eq!(
            LocalTime::from_unix(new_year + 13 * 3_600 + 45 * 60 + 59, 0),
            LocalTime {
                weekday: MON,
                minute: at(13, 45)
            }
        );
        // New York (UTC-5) is still on Sunday evening.
        assert_eq!(
            LocalTime::from_unix(new_year, -300),
            LocalTime {
                weekday: SUN,
                minute: at(19, 0)
            }
        );
        // Kathmandu (UTC+5:45).
        assert_eq!(
            LocalTime::from_unix(new_year - 60, 345),
            LocalTime {
                weekday: MON,
                minute: at(5, 44)
            }
        );
        // Before 1970: the last minute of a Wednesday.
        assert_eq!(
            LocalTime::from_unix(-1, 0),
            LocalTime {
                weekday: 2,
                minute: at(23, 59)
            }
        );
        // A week later is the same local time.
        assert_eq!(
            LocalTime::from_unix(new_year + 7 * 86_400, 60),
            LocalTime::from_unix(new_year, 60)
        );
    }

    #[test]
    fn local_time_extremes_stay_in_range() {
        for unix in [i64::MIN, i64::MIN + 1, -86_401, 0, 86_399, i64::MAX] {
            for offset in [i32::MIN, -840, 0, 840, i32::MAX] {
                let t = LocalTime::from_unix(unix, offset);
                assert!(t.weekday < 7 && t.minute < MINUTES_PER_DAY);
            }
        }
    }

    #[test]
    fn policy_with_local_time_end_to_end() {
        // Allowed Saturdays 10:00-12:00 local, in a zone two hours ahead of UTC.
        let policy = Policy {
            windows: vec![window(SATURDAY, at(10, 0), at(12, 0))],
            ..Policy::default()
        };
        // 2024-01-06 is a Saturday; 08:30 UTC is 10:30 local.
        let saturday = 1_704_067_200 + 5 * 86_400;
        let t = LocalTime::from_unix(saturday + 8 * 3_600 + 30 * 60, 120);
        assert!(policy.allowed_at(t.weekday, t.minute));
        let t = LocalTime::from_unix(saturday + 10 * 3_600, 120);
        assert!(!policy.allowed_at(t.weekday, t.minute));
    }
}
