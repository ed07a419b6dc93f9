//! `FenceTable::ensure_on` on a plain sqlx pool of each engine: a database
//! that keeps fenced data and no leases. The table is created without any
//! lease check (the PostgreSQL and MariaDB here run with the settings that
//! `SqlStrategy::connect` refuses for leases), fenced writes are accepted and
//! refused as on the lease database, calling it again changes nothing, and a
//! fence table an older version made (without the issuer columns) gets them
//! with its rows' fences kept. A missing server is said loudly, and fails
//! under `CI=true`.

use leasehold_conformance::servers::{ServerKind, Settings, provide_with};
use leasehold_core::{Fence, FenceStamp, PoolName};
use leasehold_sql::sqlx::{self, MySqlPool, PgPool, SqlitePool};
use leasehold_sql::{FenceTable, SqlConfig, SqlError, SqlStrategy};

fn server(kind: ServerKind) -> Option<leasehold_conformance::servers::Server> {
    match provide_with(kind, Settings::Fast) {
        Ok(server) => Some(server),
        Err(missing) if !leasehold_conformance::in_ci() => {
            eprintln!("NOT RUN on {}: {missing}", kind.name());
            None
        }
        Err(missing) => panic!("{missing}"),
    }
}

fn stamp(pool: &str, fence: u64) -> FenceStamp {
    FenceStamp::new(PoolName::new(pool).unwrap(), 0, Fence(fence))
}

/// What every engine must show, written once over the engine's pool type.
macro_rules! fenced_writes_on_a_plain_pool {
    ($db:expr) => {{
        let db = $db;
        let fences = FenceTable::new("plain_fences").unwrap();
        fences.ensure_on(&db).await.unwrap();
        fences.ensure_on(&db).await.unwrap(); // again: nothing changes

        let mut tx = db.begin().await.unwrap();
        fences
            .advance(&mut *tx, "ledger", &stamp("leader", 5))
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let mut tx = db.begin().await.unwrap();
        let older = fences
            .advance(&mut *tx, "ledger", &stamp("leader", 4))
            .await;
        assert!(
            matches!(older, Err(SqlError::Stale { .. })),
            "an older fence was not refused: {older:?}"
        );
        drop(tx);

        let mut tx = db.begin().await.unwrap();
        let other = fences.advance(&mut *tx, "ledger", &stamp("other", 9)).await;
        assert!(
            matches!(other, Err(SqlError::OtherWriter { .. })),
            "another pool's fence was not refused: {other:?}"
        );
        drop(tx);

        let mut tx = db.begin().await.unwrap();
        fences
            .advance(&mut *tx, "ledger", &stamp("leader", 5))
            .await
            .unwrap(); // the same holder writes again with its fence
        tx.commit().await.unwrap();
    }};
}

/// An older fence table (no `pool`, `slot`) with a row at fence 7: after
/// `ensure_on` a write at fence 6 is refused and one at 7 accepted.
macro_rules! an_old_table_gets_the_issuer_columns {
    ($db:expr, $old:expr, $insert:expr) => {{
        let db = $db;
        sqlx::query($old).execute(&db).await.unwrap();
        sqlx::query($insert).execute(&db).await.unwrap();
        let fences = FenceTable::new("old_fences").unwrap();
        fences.ensure_on(&db).await.unwrap();
        let mut tx = db.begin().await.unwrap();
        let older = fences.advance(&mut *tx, "kept", &stamp("leader", 6)).await;
        assert!(
            matches!(older, Err(SqlError::Stale { .. })),
            "the migrated row lost its fence: {older:?}"
        );
        drop(tx);
        let mut tx = db.begin().await.unwrap();
        fences
            .advance(&mut *tx, "kept", &stamp("leader", 7))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }};
}

#[tokio::test]
async fn postgres_fences_on_a_plain_pool_with_fsync_off() {
    let Some(server) = server(ServerKind::PostgresLatest) else {
        return;
    };
    // The contrast: leases are refused on this server.
    let refused = SqlStrategy::connect(SqlConfig::new(&server.url)).await;
    assert!(
        matches!(refused, Err(SqlError::Forgetful(_))),
        "leases on fsync = off were not refused: {refused:?}"
    );
    fenced_writes_on_a_plain_pool!(PgPool::connect(&server.url).await.unwrap());
    an_old_table_gets_the_issuer_columns!(
        PgPool::connect(&server.url).await.unwrap(),
        "CREATE TABLE old_fences (resource VARCHAR(255) PRIMARY KEY, fence BIGINT NOT NULL, \
         updated_at TIMESTAMPTZ(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
        "INSERT INTO old_fences (resource, fence) VALUES ('kept', 7)"
    );
}

#[tokio::test]
async fn mariadb_fences_on_a_plain_pool() {
    let Some(server) = server(ServerKind::MariaDb) else {
        return;
    };
    fenced_writes_on_a_plain_pool!(MySqlPool::connect(&server.url).await.unwrap());
    an_old_table_gets_the_issuer_columns!(
        MySqlPool::connect(&server.url).await.unwrap(),
        "CREATE TABLE old_fences (resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE \
         utf8mb4_bin PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, updated_at DATETIME(6) NOT \
         NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB",
        "INSERT INTO old_fences (resource, fence) VALUES ('kept', 7)"
    );
}

#[tokio::test]
async fn sqlite_fences_on_a_plain_pool() {
    let dir = std::env::temp_dir().join(format!("leasehold-plain-fences-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("data.sqlite").display());
    fenced_writes_on_a_plain_pool!(SqlitePool::connect(&url).await.unwrap());
    an_old_table_gets_the_issuer_columns!(
        SqlitePool::connect(&url).await.unwrap(),
        "CREATE TABLE old_fences (resource TEXT PRIMARY KEY, fence INTEGER NOT NULL, \
         updated_at TEXT NOT NULL DEFAULT '')",
        "INSERT INTO old_fences (resource, fence) VALUES ('kept', 7)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
