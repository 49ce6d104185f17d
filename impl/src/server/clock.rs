//! This node's clock: `offset_ms + elapsed × rate` from tokio's monotonic clock (the
//! simulator's, when simulated), never decreasing as read.

use std::time::Duration;

use tokio::time::Instant;

use crate::rpc::ClockReading;

/// This node's clock: `offset_ms + elapsed × rate`, never decreasing as read.
#[derive(Debug)]
pub(super) struct Clock {
    anchor: Instant,
    anchor_ms: f64,
    rate: f64,
    last_ms: u64,
}

impl Clock {
    pub(super) fn new(rate: f64) -> Self {
        Clock {
            anchor: Instant::now(),
            anchor_ms: 0.0,
            rate,
            last_ms: 0,
        }
    }

    pub(super) fn now_ms(&mut self) -> u64 {
        let elapsed_ms = self.anchor.elapsed().as_secs_f64() * 1000.0;
        // Truncation is the point: the core's clock has millisecond resolution.
        let reading = (self.anchor_ms + elapsed_ms * self.rate).max(0.0) as u64;
        self.last_ms = self.last_ms.max(reading);
        self.last_ms
    }

    /// The real instant at which the clock will read `at_ms`.
    pub(super) fn instant_of(&mut self, at_ms: u64) -> Instant {
        let now_ms = self.now_ms();
        if at_ms <= now_ms {
            return Instant::now();
        }
        let wait_ms = (at_ms as f64 - self.anchor_ms) / self.rate;
        // Sleep one millisecond past the deadline, so that the tick finds it passed.
        self.anchor + Duration::from_secs_f64(wait_ms.max(0.0) / 1000.0) + Duration::from_millis(1)
    }

    pub(super) fn set(&mut self, rate: f64, jump_ms: i64) -> ClockReading {
        let now_ms = self.now_ms();
        self.anchor = Instant::now();
        self.anchor_ms = now_ms as f64 + jump_ms as f64;
        self.rate = rate;
        ClockReading {
            now_ms: self.now_ms(),
            rate,
        }
    }

    pub(super) fn reading(&mut self) -> ClockReading {
        ClockReading {
            now_ms: self.now_ms(),
            rate: self.rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_scales_jumps_and_never_goes_backwards() {
        // research/design.md §3.4 item 6: `--clock-rate r` scales the node's clock; the core
        // requires Tick never to decrease.
        let mut clock = Clock::new(2.0);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(clock.now_ms(), 200);
        clock.set(1.0, 1000);
        assert_eq!(clock.now_ms(), 1200);
        clock.set(1.0, -500);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(clock.now_ms(), 1200, "held still after a backward jump");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(clock.now_ms(), 1300);
        let at = clock.instant_of(1400);
        tokio::time::sleep_until(at).await;
        assert!(
            clock.now_ms() >= 1400,
            "woken before the deadline: {}",
            clock.now_ms()
        );
    }
}
