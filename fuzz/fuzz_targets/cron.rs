//! Cron expressions as the engine validates them (`cron_expr` of `subagent_create` /
//! `subagent_schedule`, and every cron re-arm). Arbitrary text must give `Ok` or a readable
//! error, never a panic; an `Ok` fire time is strictly after the reference time, and the same
//! input always gives the same answer.
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
    let result = next_fire(expr, after);
    match &result {
        Ok(next) => assert!(*next > after, "{expr:?}: next fire {next} is not after {after}"),
        Err(message) => assert!(!message.is_empty(), "{expr:?}: empty error"),
    }
    assert_eq!(next_fire(expr, after), result, "not deterministic");
});
