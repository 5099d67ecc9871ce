//! The throwaway PostgreSQL cluster the PostgreSQL tests run on (`testing/postgres.rs`): it
//! starts, a database it makes accepts queries from its owner, that owner is no superuser, and
//! the cluster is gone once dropped.

#![allow(clippy::unwrap_used)]

#[path = "../../../testing/postgres.rs"]
mod postgres;

use postgres::{OWNER, PgCluster};
use sqlx::Connection;

#[tokio::test]
async fn a_throwaway_cluster_starts_and_its_database_answers_its_owner_who_is_no_superuser() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.database();
    let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
    let (user, superuser, answer): (String, bool, i32) = sqlx::query_as(
        "SELECT current_user::text, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user), 6 * 7",
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!((user.as_str(), superuser, answer), (OWNER, false, 42));
    let owner = cluster.psql_as_superuser(
        "postgres",
        &format!(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '{}'",
            PgCluster::database_name(&url)
        ),
    );
    assert_eq!(owner, OWNER);
    connection.close().await.unwrap();
}

#[test]
fn a_dropped_cluster_stops_its_server_and_removes_its_directory() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let (port, dir) = (cluster.port(), cluster.dir().to_owned());
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    drop(cluster);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server still listens on {port} after the drop"
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
