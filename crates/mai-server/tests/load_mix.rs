//! The load generator's request mix (examples/loadgen_http) at a small size, on every test run:
//! 500 requests at concurrency 16, one in five malformed, against the real router with MCP
//! nested — no answer may be a 5xx or be missing, and each must be of its expected class.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/loadgen_http/mix.rs"]
mod mix;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mixed_load_gets_no_5xx_and_every_answer_of_its_class() {
    let target = mix::Target::start().await.unwrap();
    let report = mix::run(&target, 500, 16).await.unwrap();
    report.print();
    assert_eq!(report.total, 500);
    assert_eq!(
        report.server_errors(),
        0,
        "5xx answers: {:?}",
        report.by_status
    );
    assert_eq!(report.transport_errors, 0, "{:?}", report.samples);
    assert!(
        report.unexpected.is_empty(),
        "{:?} {:?}",
        report.unexpected,
        report.samples
    );
    assert!(report.malformed.len() >= 90, "{}", report.malformed.len());
    for status in [400, 401, 403, 404, 413, 415, 422] {
        assert!(
            report.by_status.contains_key(&status),
            "no {status} in {:?}",
            report.by_status
        );
    }
}
