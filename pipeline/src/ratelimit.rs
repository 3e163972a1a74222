//! Token bucket for things that must not be generated at line rate (ICMP errors first).
//!
//! Credit is kept in nano-tokens (one token = 10^9) so that refill is exact integer arithmetic:
//! `elapsed_ns * rate_per_sec` nano-tokens per interval, with no division and no rounding drift.
//! The largest bucket (`u32::MAX` tokens) is about 4.3 * 10^18 nano-tokens, which fits in a
//! `u64`; refill saturates and is then capped at the burst, so an arbitrarily long idle gap
//! cannot overflow.

const NANO_TOKENS_PER_TOKEN: u64 = 1_000_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    rate_per_sec: u64,
    capacity_nano_tokens: u64,
    credit_nano_tokens: u64,
    last_refill_ns: u64,
}

impl TokenBucket {
    /// The bucket starts full so that the first burst after start-up is not refused.
    ///
    /// A rate of 0 means "disabled": it gets no capacity at all, because a bucket that never
    /// refills would otherwise hand out one burst and then nothing, which is never what a
    /// configured 0 means.
    pub fn new(rate_per_sec: u32, burst: u32) -> Self {
        let capacity_nano_tokens = if rate_per_sec == 0 {
            0
        } else {
            u64::from(burst) * NANO_TOKENS_PER_TOKEN
        };
        Self {
            rate_per_sec: u64::from(rate_per_sec),
            capacity_nano_tokens,
            credit_nano_tokens: capacity_nano_tokens,
            last_refill_ns: 0,
        }
    }

    /// A clock that appears to go backwards mints no tokens, and the bucket keeps its later
    /// timestamp so the same interval is not credited twice.
    #[inline]
    pub fn try_take(&mut self, now_ns: u64) -> bool {
        let elapsed_ns = now_ns.saturating_sub(self.last_refill_ns);
        self.last_refill_ns = self.last_refill_ns.max(now_ns);
        self.credit_nano_tokens = self
            .credit_nano_tokens
            .saturating_add(elapsed_ns.saturating_mul(self.rate_per_sec))
            .min(self.capacity_nano_tokens);
        if self.credit_nano_tokens >= NANO_TOKENS_PER_TOKEN {
            self.credit_nano_tokens -= NANO_TOKENS_PER_TOKEN;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn count_taken(bucket: &mut TokenBucket, now_ns: u64, attempts: usize) -> usize {
        (0..attempts).filter(|_| bucket.try_take(now_ns)).count()
    }

    #[test]
    fn full_burst_is_available_at_start_then_refused() {
        let mut bucket = TokenBucket::new(10, 5);
        assert_eq!(count_taken(&mut bucket, SECOND, 100), 5);
        assert!(!bucket.try_take(SECOND));
    }

    #[test]
    fn refills_at_the_configured_rate() {
        let mut bucket = TokenBucket::new(10, 5);
        assert_eq!(count_taken(&mut bucket, 0, 5), 5);
        // 10/s is one token per 100 ms.
        assert!(!bucket.try_take(SECOND / 10 - 1));
        assert!(bucket.try_take(SECOND / 10));
        assert!(!bucket.try_take(SECOND / 10));
        assert_eq!(
            count_taken(&mut bucket, SECOND / 10 + 3 * SECOND / 10, 100),
            3
        );
    }

    #[test]
    fn fractional_intervals_accumulate_exactly() {
        // A burst above 1 so that the cap does not discard the sub-token remainder.
        let mut bucket = TokenBucket::new(3, 10);
        assert_eq!(count_taken(&mut bucket, 0, 10), 10);
        // One third of a second is not representable in ns; the remainder must carry over.
        assert!(!bucket.try_take(333_333_333));
        assert!(bucket.try_take(333_333_334));
        let mut taken = 0;
        let mut now = 333_333_334;
        for _ in 0..3_000 {
            now += 1_000_000;
            taken += usize::from(bucket.try_take(now));
        }
        // 3 s at 3/s.
        assert_eq!(taken, 9);
    }

    #[test]
    fn long_idle_is_capped_at_burst() {
        let mut bucket = TokenBucket::new(u32::MAX, u32::MAX);
        assert!(bucket.try_take(0));
        assert!(bucket.try_take(u64::MAX));

        let mut bucket = TokenBucket::new(1_000, 4);
        assert_eq!(count_taken(&mut bucket, 0, 10), 4);
        assert_eq!(count_taken(&mut bucket, u64::MAX, 10), 4);
        assert!(!bucket.try_take(u64::MAX));
    }

    #[test]
    fn clock_going_backwards_mints_nothing() {
        let mut bucket = TokenBucket::new(1, 1);
        assert!(bucket.try_take(10 * SECOND));
        assert!(!bucket.try_take(SECOND));
        assert!(!bucket.try_take(10 * SECOND + SECOND - 1));
        assert!(bucket.try_take(11 * SECOND));
    }

    #[test]
    fn rate_zero_never_allows() {
        let mut bucket = TokenBucket::new(0, 1_000);
        for now in [0, 1, SECOND, 1_000 * SECOND, u64::MAX] {
            assert!(!bucket.try_take(now));
        }
    }

    #[test]
    fn burst_zero_never_allows() {
        let mut bucket = TokenBucket::new(1_000, 0);
        for now in [0, SECOND, u64::MAX] {
            assert!(!bucket.try_take(now));
        }
    }
}
