//! Cron expressions as the engine validates them (`cron_expr` of `subagent_create` /
//! `subagent_schedule`, and every cron re-arm). Arbitrary text must give `Ok` or a readable
//! error, never a panic; an `Ok` fire time is strictly after the reference time, and the same
//! input always gives the same answer.
//!
//! An expression that never fires (`0 0 31 2 *`, an empty list `0 0 , * *`, an empty AND-mode
//! weekday `* * * * +`) costs croner a walk to the year 5000: ~100 ms in release, seconds in this
//! ASan + debug-assertions build. That is known and bounded (the engine runs the search on the
//! blocking pool); run.sh allows 30 s per input so only a real hang fails.
#![no_main]

use chrono::{DateTime, TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use mai_engine::fuzzing::next_fire;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    // A reference time between 1970 and ~2106 (u32 seconds), as the scheduler could have.
    let seconds = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let Some(after): Option<DateTime<Utc>> = Utc.timestamp_opt(i64::from(seconds), 0).single()
    else {
        return;
    };
    let Ok(expr) = std::str::from_utf8(&data[4..]) else {
        return;
    };
    match next_fire(expr, after) {
        Ok(next) => {
            assert!(
                next > after,
                "{expr:?}: next fire {next} is not after {after}"
            );
            // Only when cheap: a never-firing expression costs seconds in this build.
            assert_eq!(next_fire(expr, after), Ok(next), "not deterministic");
        }
        Err(message) => assert!(!message.is_empty(), "{expr:?}: empty error"),
    }
});
