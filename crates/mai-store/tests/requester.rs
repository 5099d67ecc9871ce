//! Who a task acts for, in the store: lists by requester, the figures the caps on task creation
//! count, and the upgrade that gives tasks stored before requesters existed their owner as
//! requester.
#![allow(clippy::unwrap_used, clippy::expect_used)] // fixtures panic on setup failure

mod common;

use common::{at, file_store, owner, stream, task};
use mai_core::ids::PersonId;
use mai_core::store::{CountQuery, TaskCounts, TaskFilter, TaskStore, TaskWrite};
use mai_core::task::{TaskRecord, TaskStatus, Trigger};
use mai_store::SqliteStore;

fn person(text: &str) -> PersonId {
    text.parse().unwrap()
}

/// A planner task of stream `s1` made for `speaker` (or for nobody).
fn planner_task(title: &str, created: i64, speaker: Option<&str>) -> TaskRecord {
    let mut record = task(title, created);
    record.owner = owner("planner:s1");
    record.metadata.requester = speaker.map(person);
    record
}

async fn titles(store: &SqliteStore, filter: TaskFilter) -> Vec<String> {
    let mut titles: Vec<String> = store
        .list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|task| task.title)
        .collect();
    titles.sort();
    titles
}

#[tokio::test]
async fn tasks_are_listed_by_the_person_they_act_for_whoever_owns_them() {
    let fs = file_store().await;
    let mut other = task("theirs", 2);
    other.owner = owner("qq:2");
    for record in [
        task("mine", 0),
        planner_task("planned for me", 1, Some("qq:1")),
        other,
        planner_task("for nobody", 3, None),
    ] {
        fs.store.insert(&record).await.unwrap();
    }
    let mine = TaskFilter {
        requester: Some(person("qq:1")),
        ..TaskFilter::default()
    };
    assert_eq!(titles(&fs.store, mine).await, ["mine", "planned for me"]);
    let theirs = TaskFilter {
        requester: Some(person("qq:2")),
        ..TaskFilter::default()
    };
    assert_eq!(titles(&fs.store, theirs).await, ["theirs"]);
}

#[tokio::test]
async fn the_caps_count_unfinished_and_recurring_tasks_and_children() {
    let fs = file_store().await;
    let parent = task("parent", 0);
    fs.store.insert(&parent).await.unwrap();
    let mut plan: Vec<TaskRecord> = Vec::new();
    for (index, status) in [TaskStatus::Scheduled, TaskStatus::Completed]
        .into_iter()
        .enumerate()
    {
        let mut cron = task(&format!("cron {index}"), 1 + index as i64);
        cron.trigger = Trigger::Cron {
            expr: "0 18 * * *".into(),
            timezone: None,
        };
        cron.force(status, "test", "setup", at(10));
        plan.push(cron);
    }
    for index in 0..3 {
        let mut child = task(&format!("child {index}"), 5 + index);
        child.metadata.parent_task_id = Some(parent.id);
        child.metadata.depth = 1;
        plan.push(child);
    }
    // A reply delivers the parent's result: it is not one of its sub-tasks.
    let mut reply = task("reply: parent", 9);
    reply.metadata.parent_task_id = Some(parent.id);
    reply.metadata.is_reply = true;
    reply.force(TaskStatus::Completed, "test", "sent", at(10));
    plan.push(reply);
    // Someone else in the same chat, and the same person in another.
    let mut stranger = planner_task("stranger's", 12, Some("qq:9"));
    stranger.stream_id = stream("s1");
    plan.push(stranger);
    let mut elsewhere = task("elsewhere", 13);
    elsewhere.stream_id = stream("s2");
    plan.push(elsewhere);
    // Inserted together, so the batch write path stores the columns too.
    let writes: Vec<TaskWrite<'_>> = plan.iter().map(TaskWrite::InsertIfAbsent).collect();
    fs.store.write(&writes).await.unwrap();

    let me = person("qq:1");
    let counts = fs
        .store
        .counts(&CountQuery {
            requester: Some(&me),
            stream: &stream("s1"),
            created_by: Some(parent.id),
            recurring: true,
            created_since: None,
        })
        .await
        .unwrap();
    assert_eq!(
        counts,
        TaskCounts {
            // parent, scheduled cron, 3 children, elsewhere
            unfinished_by_requester: 6,
            // parent, scheduled cron, 3 children, the stranger's
            unfinished_in_stream: 6,
            recurring_by_requester: 1,
            recurring_in_stream: 1,
            children: 3,
            ..TaskCounts::default()
        }
    );
    // Not asked for the recurring figures (the new task is not recurring): they are 0, the
    // rest the same.
    let unasked = fs
        .store
        .counts(&CountQuery {
            requester: Some(&me),
            stream: &stream("s1"),
            created_by: Some(parent.id),
            recurring: false,
            created_since: None,
        })
        .await
        .unwrap();
    assert_eq!(
        unasked,
        TaskCounts {
            recurring_by_requester: 0,
            recurring_in_stream: 0,
            ..counts
        }
    );
    let nobody = fs
        .store
        .counts(&CountQuery {
            requester: None,
            stream: &stream("s3"),
            created_by: None,
            recurring: true,
            created_since: None,
        })
        .await
        .unwrap();
    assert_eq!(nobody, TaskCounts::default());
}

#[tokio::test]
async fn an_upgraded_store_gives_its_old_tasks_their_owner_or_speaker_as_requester() {
    let fs = file_store().await;
    let parent = task("person's", 0);
    let mut child = task("sub-task", 1);
    child.metadata.parent_task_id = Some(parent.id);
    for record in [
        parent.clone(),
        child,
        planner_task("planned", 2, Some("qq:7")),
        planner_task("nobody's", 3, None),
    ] {
        fs.store.insert(&record).await.unwrap();
    }
    fs.store.close().await;
    // Back to schema version 2: the columns, the usage table, the keyed history and status log
    // and the record of their migrations gone.
    let conn = rusqlite::Connection::open(fs.path()).unwrap();
    for statement in [
        "DROP TRIGGER task_status_log_goes_with_its_task",
        "CREATE TABLE old_log (task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE, \
         seq INTEGER NOT NULL, at TEXT NOT NULL, status TEXT NOT NULL, actor TEXT NOT NULL, \
         reason TEXT NOT NULL, PRIMARY KEY (task_id, seq)) STRICT, WITHOUT ROWID",
        "INSERT INTO old_log SELECT task_id, seq, at, status, actor, reason FROM task_status_log",
        "DROP TABLE task_status_log",
        "ALTER TABLE old_log RENAME TO task_status_log",
        "DROP TRIGGER task_history_goes_with_its_task",
        "DROP TABLE task_history",
        "CREATE TABLE task_history (task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE \
         CASCADE, seq INTEGER NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT \
         NOT NULL, at TEXT NOT NULL, PRIMARY KEY (task_id, seq)) STRICT",
        "DROP INDEX tasks_by_num",
        "ALTER TABLE tasks DROP COLUMN num",
        "DROP INDEX tasks_by_parent",
        "ALTER TABLE tasks DROP COLUMN parent_id",
        "DROP TABLE usage",
        "DROP INDEX tasks_by_requester",
        "DROP INDEX tasks_by_created_by",
        "DROP INDEX tasks_active_by_requester",
        "DROP INDEX tasks_active_by_stream",
        "ALTER TABLE tasks DROP COLUMN requester",
        "ALTER TABLE tasks DROP COLUMN created_by",
        "DELETE FROM _sqlx_migrations WHERE version >= 3",
    ] {
        conn.execute_batch(statement).unwrap();
    }
    drop(conn);

    let store = SqliteStore::open(fs.path()).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), 8);
    let of = |who: &str| TaskFilter {
        requester: Some(person(who)),
        ..TaskFilter::default()
    };
    assert_eq!(titles(&store, of("qq:1")).await, ["person's", "sub-task"]);
    assert_eq!(titles(&store, of("qq:7")).await, ["planned"]);
    let counts = store
        .counts(&CountQuery {
            requester: None,
            stream: &stream("s1"),
            created_by: Some(parent.id),
            recurring: false,
            created_since: None,
        })
        .await
        .unwrap();
    assert_eq!(counts.children, 1);
    // Version 5 names the parent of the tasks that were there before it.
    let children = TaskFilter {
        parent: Some(parent.id),
        ..TaskFilter::default()
    };
    assert_eq!(titles(&store, children).await, ["sub-task"]);
}
