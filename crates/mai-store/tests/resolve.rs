//! Resolving what a person typed: a full id, an id prefix (dashes optional), a unique title.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use common::{file_store, task};
use mai_core::store::{Resolved, TaskStore};
use mai_core::task::{TaskId, TaskRecord};
use mai_store::AMBIGUOUS_LIMIT;
use uuid::Uuid;

fn with_id(title: &str, id: &str, created: i64) -> TaskRecord {
    let mut record = task(title, created);
    record.id = TaskId(Uuid::parse_str(id).unwrap());
    record
}

fn found_id(resolved: &Resolved) -> Option<TaskId> {
    match resolved {
        Resolved::Found(task) => Some(task.id),
        _ => None,
    }
}

/// Three tasks: two share the prefix `0192ab3c-1`, one title is used twice.
async fn seeded() -> (common::FileStore, [TaskRecord; 3]) {
    let fs = file_store().await;
    let tasks = [
        with_id("disk", "0192ab3c-1d00-7000-8000-000000000001", 0),
        with_id("backup", "0192ab3c-1e00-7000-8000-000000000002", 1),
        with_id("backup", "0193ffff-0000-7000-8000-000000000003", 2),
    ];
    for record in &tasks {
        fs.store.insert(record).await.unwrap();
    }
    (fs, tasks)
}

#[tokio::test]
async fn a_full_id_in_any_uuid_form_finds_the_task() {
    let (fs, [disk, ..]) = seeded().await;
    for reference in [
        disk.id.to_string(),
        disk.id.0.simple().to_string(),
        disk.id.to_string().to_uppercase(),
        format!("  {}  ", disk.id),
    ] {
        let resolved = fs.store.resolve(&reference).await.unwrap();
        assert_eq!(found_id(&resolved), Some(disk.id), "{reference}");
    }
    let Resolved::Found(record) = fs.store.resolve(&disk.id.to_string()).await.unwrap() else {
        panic!("not found");
    };
    assert_eq!(*record, disk, "the whole record comes back");
}

#[tokio::test]
async fn a_unique_prefix_finds_the_task_with_or_without_dashes() {
    let (fs, [disk, _, other]) = seeded().await;
    for reference in ["0192ab3c-1d", "0192ab3c1d", "0192AB3C1D", "0192-ab3c-1d"] {
        let resolved = fs.store.resolve(reference).await.unwrap();
        assert_eq!(found_id(&resolved), Some(disk.id), "{reference}");
    }
    assert_eq!(other.id.short(), "0193ffff");
    let resolved = fs.store.resolve(&other.id.short()).await.unwrap();
    assert_eq!(
        found_id(&resolved),
        Some(other.id),
        "the 8-character short id"
    );
    let resolved = fs.store.resolve("0193").await.unwrap();
    assert_eq!(
        found_id(&resolved),
        Some(other.id),
        "four hex digits are enough"
    );
}

#[tokio::test]
async fn a_shared_prefix_is_ambiguous_and_names_the_candidates() {
    let (fs, [disk, backup, _]) = seeded().await;
    for reference in ["0192ab3c", "0192-ab3c-1", "0192"] {
        assert_eq!(
            fs.store.resolve(reference).await.unwrap(),
            Resolved::Ambiguous(vec![disk.id, backup.id]),
            "{reference}"
        );
    }
}

#[tokio::test]
async fn a_unique_title_finds_the_task_and_a_shared_title_is_ambiguous() {
    let (fs, [disk, backup, other]) = seeded().await;
    assert_eq!(
        found_id(&fs.store.resolve("disk").await.unwrap()),
        Some(disk.id)
    );
    assert_eq!(
        fs.store.resolve("backup").await.unwrap(),
        Resolved::Ambiguous(vec![backup.id, other.id])
    );
    assert_eq!(
        fs.store.resolve("Disk").await.unwrap(),
        Resolved::NotFound,
        "titles are exact"
    );
}

#[tokio::test]
async fn a_hex_looking_title_is_found_when_no_id_starts_with_it() {
    let (fs, _) = seeded().await;
    let beef = task("beef", 3);
    fs.store.insert(&beef).await.unwrap();
    assert_eq!(
        found_id(&fs.store.resolve("beef").await.unwrap()),
        Some(beef.id)
    );
}

#[tokio::test]
async fn unknown_references_are_not_found() {
    let (fs, _) = seeded().await;
    for reference in [
        "",
        "   ",
        "nothing",
        "0194",
        "019",
        "0192ab3c-1d00-7000-8000-000000000009",
        &TaskId::new().to_string(),
    ] {
        assert_eq!(
            fs.store.resolve(reference).await.unwrap(),
            Resolved::NotFound,
            "{reference:?}"
        );
    }
}

#[tokio::test]
async fn a_very_ambiguous_prefix_lists_a_bounded_number_of_candidates() {
    let fs = file_store().await;
    for n in 0..AMBIGUOUS_LIMIT + 5 {
        let id = format!("0192ab3c-0000-7000-8000-{n:012}");
        fs.store
            .insert(&with_id("same", &id, n as i64))
            .await
            .unwrap();
    }
    let Resolved::Ambiguous(ids) = fs.store.resolve("0192ab3c").await.unwrap() else {
        panic!("ambiguous expected");
    };
    assert_eq!(ids.len(), AMBIGUOUS_LIMIT);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "in id order");
}
