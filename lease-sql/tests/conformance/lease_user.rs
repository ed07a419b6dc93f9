//! Least privilege: the `-lease-user` rows run the suite as a user made
//! with `leasehold_sql::lease_user_sql` (the statements the crate README
//! shows), which may read, insert and update the lease table and nothing
//! else, while an admin prepares. And each privilege it needs, revoked in
//! turn from a user of its own, makes the operation that needs it fail
//! with an error naming the GRANT to add.

use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::{Glue, ensure, fresh_pool};
use leasehold_core::{DurabilityPolicy, Floor, Renewal, Strategy, Token};
use leasehold_sql::{Engine, SqlConfig, SqlStrategy, TableName, lease_user_sql};

use super::{Sql, raw};

/// The lease user of the `-lease-user` rows.
pub(crate) const LEASE_USER: &str = "leasehold_lease";

/// `url` with `user` and `password` in place of its credentials.
pub(crate) fn with_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}:{password}@{host}")
}

/// The database `url` names (its path), which MySQL/MariaDB grants name.
fn database(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.split_once('/').map_or("", |(_, p)| p);
    path.split('?').next().unwrap_or("").to_owned()
}

/// Creates the lease user `user` on the server of the admin URL `admin`
/// with the crate's statements, after the admin has made the lease table;
/// its URL.
pub(crate) async fn create(admin: &str, user: &str) -> Result<String, String> {
    let s = SqlStrategy::connect(
        SqlConfig::from_url(admin)
            .map_err(|e| e.to_string())?
            .durability(DurabilityPolicy::Throwaway),
    )
    .await
    .map_err(|e| e.to_string())?;
    s.ensure_table().await.map_err(|e| e.to_string())?;
    let password = Token::random().to_hex();
    let statements = lease_user_sql(
        s.engine(),
        &TableName::default(),
        &database(admin),
        user,
        &password,
    )
    .map_err(|e| e.to_string())?;
    for sql in &statements {
        raw(&s, sql).await?;
    }
    s.close().await;
    Ok(with_user(admin, user, &password))
}

/// The lease user has every privilege the lease operations need, and no
/// more: it cannot create a table (so `prepare` is the admin's).
async fn the_lease_user_has_its_grants_and_cannot_create_tables(b: Arc<Sql>) -> Result<(), String> {
    let s = b.strategy().await?;
    let missing = s.missing_grants().await.map_err(|e| e.to_string())?;
    ensure!(missing.is_empty(), "the lease user lacks {missing:?}");
    let name = format!("not_allowed_{}", &Token::random().to_hex()[..8]);
    let created = raw(&s, &format!("CREATE TABLE {name} (x INTEGER)")).await;
    s.close().await;
    ensure!(
        created.is_err(),
        "the lease user created table {name}: it has more than it needs"
    );
    Ok(())
}

/// A user of its own, made with the lease user's statements, less
/// `privilege`: its URL, its name, and the GRANT its errors must name.
async fn user_without(b: &Sql, privilege: &str) -> Result<(String, String, String), String> {
    let admin_url = b.admin.clone().ok_or("not a lease-user row")?;
    let user = format!("lease_{}", &Token::random().to_hex()[..10]);
    let url = create(&admin_url, &user).await?;
    let admin = b.admin().await?;
    let (revoke, grant) = match admin.engine() {
        Engine::MySql => {
            let table = format!("`{}`.`leasehold_leases`", database(&admin_url));
            (
                format!("REVOKE {privilege} ON {table} FROM '{user}'@'%'"),
                format!("GRANT {privilege} ON {table} TO '{user}'@'%'"),
            )
        }
        _ => (
            format!("REVOKE {privilege} ON TABLE \"leasehold_leases\" FROM \"{user}\""),
            format!("GRANT {privilege} ON TABLE \"public\".\"leasehold_leases\" TO {user}"),
        ),
    };
    raw(&admin, &revoke).await?;
    admin.close().await;
    Ok((url, user, grant))
}

/// Drops a user [`user_without`] made.
async fn drop_user(b: &Sql, user: &str) -> Result<(), String> {
    let admin = b.admin().await?;
    let sql = match admin.engine() {
        Engine::MySql => format!("DROP USER '{user}'@'%'"),
        _ => format!("DROP OWNED BY \"{user}\"; DROP ROLE \"{user}\""),
    };
    let r = raw(&admin, &sql).await;
    admin.close().await;
    r
}

async fn connect(b: &Sql, url: &str) -> Result<SqlStrategy, String> {
    SqlStrategy::connect(
        SqlConfig::from_url(url)
            .map_err(|e| e.to_string())?
            .durability(b.durability()),
    )
    .await
    .map_err(|e| e.to_string())
}

/// `missing_grants` names exactly `grant`, and `error` names it too.
fn names_only(
    missing: &[leasehold_sql::MissingGrant],
    grant: &str,
    error: &str,
) -> Result<(), String> {
    let grants: Vec<&str> = missing.iter().map(|m| m.grant.as_str()).collect();
    ensure!(
        grants == [grant],
        "missing_grants answered {grants:?}, not [{grant:?}]"
    );
    ensure!(
        error.contains(grant),
        "the error does not name {grant:?}: {error}"
    );
    Ok(())
}

/// Without SELECT, a claim is refused naming `GRANT SELECT`.
async fn a_claim_without_select_names_the_grant(b: Arc<Sql>) -> Result<(), String> {
    let (url, user, grant) = user_without(&b, "SELECT").await?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    b.prepare(&pool).await?;
    let s = connect(&b, &url).await?;
    let r = s.acquire(&pool, Floor::NONE).await;
    let missing = s.missing_grants().await.map_err(|e| e.to_string())?;
    s.close().await;
    let e = match r {
        Ok(g) => return Err(format!("claimed slot {} without SELECT", g.slot)),
        Err(e) => e,
    };
    println!("{e}");
    ensure!(!e.is_retryable(), "a missing grant is final: {e:?}");
    names_only(&missing, &grant, &e.to_string())?;
    drop_user(&b, &user).await
}

/// Without INSERT, a claim on a pool whose rows are missing (it would add
/// them) is refused naming `GRANT INSERT`; a prepared pool's claims need
/// no INSERT.
async fn a_claim_that_adds_rows_without_insert_names_the_grant(b: Arc<Sql>) -> Result<(), String> {
    let (url, user, grant) = user_without(&b, "INSERT").await?;
    let s = connect(&b, &url).await?;
    let prepared = fresh_pool(1, Duration::from_secs(30))?;
    b.prepare(&prepared).await?;
    let held = s
        .acquire(&prepared, Floor::NONE)
        .await
        .map_err(|e| format!("a prepared pool's claim needs no INSERT: {e}"))?;
    let _ = s.release(&prepared, &held, Floor::NONE).await;
    let r = s
        .acquire(&fresh_pool(2, Duration::from_secs(30))?, Floor::NONE)
        .await;
    let missing = s.missing_grants().await.map_err(|e| e.to_string())?;
    s.close().await;
    let e = match r {
        Ok(g) => {
            return Err(format!(
                "claimed slot {} of a new pool without INSERT",
                g.slot
            ));
        }
        Err(e) => e,
    };
    println!("{e}");
    ensure!(!e.is_retryable(), "a missing grant is final: {e:?}");
    names_only(&missing, &grant, &e.to_string())?;
    drop_user(&b, &user).await
}

/// Without UPDATE, a claim is refused naming `GRANT UPDATE`; and a holder
/// whose UPDATE is revoked while it holds a lease is told, at its next
/// renewal, the GRANT to add.
async fn claims_and_renewals_without_update_name_the_grant(b: Arc<Sql>) -> Result<(), String> {
    let user = format!("lease_{}", &Token::random().to_hex()[..10]);
    let admin_url = b.admin.clone().ok_or("not a lease-user row")?;
    let url = create(&admin_url, &user).await?;
    let pool = fresh_pool(2, Duration::from_secs(30))?;
    b.prepare(&pool).await?;
    let s = connect(&b, &url).await?;
    let held = s
        .acquire(&pool, Floor::NONE)
        .await
        .map_err(|e| e.to_string())?;
    let admin = b.admin().await?;
    let grant = match admin.engine() {
        Engine::MySql => {
            let table = format!("`{}`.`leasehold_leases`", database(&admin_url));
            raw(
                &admin,
                &format!("REVOKE UPDATE ON {table} FROM '{user}'@'%'"),
            )
            .await?;
            format!("GRANT UPDATE ON {table} TO '{user}'@'%'")
        }
        _ => {
            raw(
                &admin,
                &format!("REVOKE UPDATE ON TABLE \"leasehold_leases\" FROM \"{user}\""),
            )
            .await?;
            format!("GRANT UPDATE ON TABLE \"public\".\"leasehold_leases\" TO {user}")
        }
    };
    admin.close().await;
    let renewal = s.renew(&pool, &held, Floor::NONE).await;
    let claim = s.acquire(&pool, Floor::NONE).await;
    let missing = s.missing_grants().await.map_err(|e| e.to_string())?;
    s.close().await;
    match &renewal {
        Renewal::Retry(why) => {
            println!("renewal: {why}");
            ensure!(
                why.to_string().contains(&grant),
                "the renewal's reason does not name {grant:?}: {why}"
            );
        }
        other => return Err(format!("a renewal without UPDATE answered {other:?}")),
    }
    let e = match claim {
        Ok(g) => return Err(format!("claimed slot {} without UPDATE", g.slot)),
        Err(e) => e,
    };
    println!("claim: {e}");
    names_only(&missing, &grant, &e.to_string())?;
    drop_user(&b, &user).await
}

/// The behaviour suite as the lease user, the SQL tests that need no
/// admin beyond `prepare`, and the privilege tests.
pub(crate) fn register(t: leasehold_conformance::Target) -> leasehold_conformance::Target {
    use super::*;
    leasehold_conformance::trials!(t;
        the_lease_user_has_its_grants_and_cannot_create_tables,
        a_claim_without_select_names_the_grant,
        a_claim_that_adds_rows_without_insert_names_the_grant,
        claims_and_renewals_without_update_name_the_grant,
        fence_grows_on_claims_never_on_renewals,
        missing_pool_rows_are_added_on_acquisition,
        claims_of_two_id_formats_racing_on_a_fresh_pool_never_both_hold_slots,
        claims_and_renewals_report_the_servers_time,
    )
}

/// What the durability and promotion checks call is `PUBLIC`'s by default;
/// revoked from `PUBLIC` in turn (on a server of this test's own: the
/// revocation is server-wide), each is named with its `GRANT EXECUTE`: at
/// connect for what connect reads, by `missing_grants` for what only the
/// promotion guard reads.
async fn revoked_check_functions_name_their_grant(_b: Arc<Sql>) -> Result<(), String> {
    use leasehold_conformance::servers::{ServerKind, provide};
    let server = provide(ServerKind::Postgres15).map_err(|m| m.to_string())?;
    let url = create(&server.url, LEASE_USER).await?;
    let admin = SqlStrategy::connect(
        SqlConfig::from_url(&server.url)
            .map_err(|e| e.to_string())?
            .durability(DurabilityPolicy::Throwaway),
    )
    .await
    .map_err(|e| e.to_string())?;
    let lease = || async {
        SqlStrategy::connect(
            SqlConfig::from_url(&url)
                .map_err(|e| e.to_string())?
                .durability(DurabilityPolicy::Throwaway),
        )
        .await
        .map_err(|e| e.to_string())
    };
    // (function, read at connect)
    for (function, at_connect) in [
        ("current_setting(text)", true),
        ("pg_postmaster_start_time()", true),
        ("pg_current_wal_lsn()", false),
        ("pg_walfile_name(pg_lsn)", false),
    ] {
        let grant = format!("GRANT EXECUTE ON FUNCTION {function} TO {LEASE_USER}");
        raw(
            &admin,
            &format!("REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC"),
        )
        .await?;
        let found = if at_connect {
            match lease().await {
                Ok(s) => {
                    s.close().await;
                    Err(format!("connected with {function} revoked"))
                }
                Err(e) => {
                    println!("{e}");
                    ensure!(e.contains(&grant), "the error does not name {grant:?}: {e}");
                    Ok(())
                }
            }
        } else {
            match lease().await {
                Ok(s) => {
                    let missing = s.missing_grants().await.map_err(|e| e.to_string());
                    s.close().await;
                    let grants: Vec<String> = missing?.into_iter().map(|m| m.grant).collect();
                    ensure!(
                        grants == [grant.clone()],
                        "missing_grants answered {grants:?}"
                    );
                    Ok(())
                }
                Err(e) => Err(format!("connect with {function} revoked: {e}")),
            }
        };
        raw(
            &admin,
            &format!("GRANT EXECUTE ON FUNCTION {function} TO PUBLIC"),
        )
        .await?;
        found?;
    }
    admin.close().await;
    drop(server);
    Ok(())
}

/// The PostgreSQL-only privilege tests.
pub(crate) fn register_postgres(t: leasehold_conformance::Target) -> leasehold_conformance::Target {
    leasehold_conformance::trials!(t; revoked_check_functions_name_their_grant)
}
