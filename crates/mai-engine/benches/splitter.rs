//! Splitting a 5,000-char mixed CJK/English reply with the default limits (1000 chars, 5 parts).
//!
//! Run: `cargo bench -p mai-engine --bench splitter`

use criterion::{Criterion, criterion_group, criterion_main};
use mai_engine::split;
use std::hint::black_box;

fn mixed_text(chars: usize) -> String {
    const PIECES: &[&str] = &[
        "我查了一下三家云服务的报价：阿里云每月99元，腾讯云每月88元。",
        "AWS costs about $15.50 per month (see https://example.com/pricing?id=3).",
        "他说：“我明天会来的，你别担心！”然后就走了。",
        "Disk usage is at 88% — nearly full, so clean up /var/log soon; ",
        "综合来看腾讯云最便宜但AWS的海外节点更多👍\n",
        "- item one: 1,000 requests per day\n",
    ];
    let mut text = String::new();
    let mut count = 0;
    for piece in PIECES.iter().cycle() {
        if count >= chars {
            break;
        }
        text.push_str(piece);
        count += piece.chars().count();
    }
    text
}

fn bench_split(c: &mut Criterion) {
    let text = mixed_text(5_000);
    c.bench_function("split 5000 mixed chars (1000 x 5)", |b| {
        b.iter(|| split(black_box(&text), 1000, 5));
    });
    c.bench_function("split 5000 mixed chars (200 x 50)", |b| {
        b.iter(|| split(black_box(&text), 200, 50));
    });
}

criterion_group!(benches, bench_split);
criterion_main!(benches);
