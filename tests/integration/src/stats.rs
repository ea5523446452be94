//! Reading `rate_limiter.stats` in the statistics tests (`stats.rs`,
//! `stats_room.rs`, `exporter.rs`): what a limit's calls answered, counted
//! as the view counts them.

use postgres::Client;

/// What the calls of one limit name answered, counted as the view counts.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Counts {
    pub calls: i64,
    pub admitted: i64,
    pub refused: i64,
    pub reserved: i64,
    pub tokens: f64,
    pub credited: f64,
    pub near_limit: i64,
    pub shadow_refused: i64,
}

impl Counts {
    /// One answer of a call asking `count` tokens of a limit of `capacity`.
    pub fn answer(&mut self, count: f64, capacity: f64, ok: bool, reserved: bool, remaining: f64) {
        self.calls += 1;
        if ok {
            self.admitted += 1;
            self.tokens += count;
            if reserved {
                self.reserved += 1;
            }
            if remaining < 0.2 * capacity {
                self.near_limit += 1;
            }
        } else {
            self.refused += 1;
        }
    }

    pub fn add(&mut self, other: &Counts) {
        self.calls += other.calls;
        self.admitted += other.admitted;
        self.refused += other.refused;
        self.reserved += other.reserved;
        self.tokens += other.tokens;
        self.credited += other.credited;
        self.near_limit += other.near_limit;
        self.shadow_refused += other.shadow_refused;
    }
}

/// The view's row for `name` (zeros when there is none), and `contended`.
pub fn counted(client: &mut Client, name: &str) -> (Counts, i64) {
    let row = client
        .query_opt(
            "SELECT calls, admitted, refused, reserved, tokens, credited, near_limit, shadow_refused, contended
             FROM rate_limiter.stats WHERE name = $1",
            &[&name],
        )
        .expect("read rate_limiter.stats");
    match row {
        None => (Counts::default(), 0),
        Some(row) => (
            Counts {
                calls: row.get(0),
                admitted: row.get(1),
                refused: row.get(2),
                reserved: row.get(3),
                tokens: row.get(4),
                credited: row.get(5),
                near_limit: row.get(6),
                shadow_refused: row.get(7),
            },
            row.get(8),
        ),
    }
}

/// The one row of `rate_limiter.stats_info`: (evicted, uncounted).
pub fn room(client: &mut Client) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT evicted, uncounted FROM rate_limiter.stats_info",
            &[],
        )
        .expect("read rate_limiter.stats_info");
    (row.get(0), row.get(1))
}
