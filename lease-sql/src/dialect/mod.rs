//! What differs between the SQL engines, and nothing else.
//!
//! A [`Dialect`] is implemented by sqlx's database type of each engine
//! (`sqlx::Postgres`, `sqlx::MySql`, `sqlx::Sqlite`, each behind its Cargo
//! feature). It says how a slot, a fence and a TTL are bound and decoded,
//! how a connection is opened, how the engine's error codes are classified,
//! and the few statement texts that are not the same everywhere. Every
//! operation is written once, generically, in `backend.rs` and the files of
//! `leases/`; a new engine is a new file here.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::fmt;
use std::future::Future;
use std::time::Duration;

use leasehold_core::credentials::Credentials;
use leasehold_core::{BoxFuture, Fence, FenceStamp, PoolName, Reason};
use sqlx::error::DatabaseError;
use sqlx::query::Query;
use sqlx::{Decode, Encode, Row, Type};

use crate::config::SqlConfig;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::ident::TableName;

/// The issuer columns of the fence table, added in 0.3
/// (`migrations/<engine>/0004_leasehold_fence_issuer.sql`;
/// `FenceTable::ensure` adds them to an older table): the pool and slot
/// whose grant issued the fence of the resource's last write. NULL on a row
/// written before they existed, until its next fenced write.
pub(crate) const FENCE_ISSUER_COLUMNS: [&str; 2] = ["pool", "slot"];

/// A database this build of the crate speaks: `sqlx::Postgres`,
/// `sqlx::MySql` and `sqlx::Sqlite`, each behind the Cargo feature of its
/// name. Sealed: an engine is added inside the crate, by implementing its
/// dialect.
#[allow(private_bounds)] // the bound is what seals it
pub trait SqlDatabase: Dialect {
    /// `FenceTable::advance` on this engine.
    #[doc(hidden)]
    fn advance_fence<'c>(
        conn: &'c mut Self::Connection,
        t: &'c str,
        resource: &'c str,
        stamp: &'c FenceStamp,
    ) -> BoxFuture<'c, Result<(), SqlError>>;

    /// `FenceTable::take_over` on this engine.
    #[doc(hidden)]
    fn take_over_fence<'c>(
        conn: &'c mut Self::Connection,
        t: &'c str,
        resource: &'c str,
        from: (&'c PoolName, u32),
        stamp: &'c FenceStamp,
    ) -> BoxFuture<'c, Result<(), SqlError>>;

    /// `FenceTable::ensure_on` on this engine: the fence table `t` created
    /// (or given its issuer columns) on a connection of the caller's.
    #[doc(hidden)]
    fn ensure_fence_on<'c>(
        conn: &'c mut Self::Connection,
        t: &'c TableName,
    ) -> BoxFuture<'c, Result<(), SqlError>>;
}

/// Writes an item generic over a dialect `D` with the bounds the operations
/// need of D's sqlx types (where-clauses are not implied, so they are spelled
/// here, once): `with_sqlx_bounds!([header] { body })`.
macro_rules! with_sqlx_bounds {
    ([$($head:tt)*] { $($body:tt)* }) => {
        $($head)*
        where
            D: $crate::dialect::Dialect,
            for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
            for<'q> D::Arguments<'q>: sqlx::IntoArguments<'q, D>,
            usize: sqlx::ColumnIndex<D::Row>,
            for<'q> &'q str: sqlx::Encode<'q, D> + sqlx::Type<D>,
            for<'q> &'q [u8]: sqlx::Encode<'q, D> + sqlx::Type<D>,
            for<'r> i64: sqlx::Decode<'r, D> + sqlx::Type<D>,
            for<'q> i64: sqlx::Encode<'q, D>,
            for<'r> String: sqlx::Decode<'r, D> + sqlx::Type<D>,
            for<'r> Vec<u8>: sqlx::Decode<'r, D> + sqlx::Type<D>,
        { $($body)* }
    };
}
pub(crate) use with_sqlx_bounds;

with_sqlx_bounds!([impl<D> SqlDatabase for D] {
    fn advance_fence<'c>(
        conn: &'c mut D::Connection,
        t: &'c str,
        resource: &'c str,
        stamp: &'c FenceStamp,
    ) -> BoxFuture<'c, Result<(), SqlError>> {
        Box::pin(fenced_write::<D>(conn, t, resource, None, stamp))
    }

    fn take_over_fence<'c>(
        conn: &'c mut D::Connection,
        t: &'c str,
        resource: &'c str,
        from: (&'c PoolName, u32),
        stamp: &'c FenceStamp,
    ) -> BoxFuture<'c, Result<(), SqlError>> {
        Box::pin(fenced_write::<D>(conn, t, resource, Some(from), stamp))
    }

    fn ensure_fence_on<'c>(
        conn: &'c mut D::Connection,
        t: &'c TableName,
    ) -> BoxFuture<'c, Result<(), SqlError>> {
        Box::pin(ensure_fence_table_on::<D>(conn, t))
    }
});

with_sqlx_bounds!([async fn ensure_fence_table_on<D>(conn: &mut D::Connection, t: &TableName) -> Result<(), SqlError>] {
    let quoted = t.quoted(D::QUOTE);
    let has = |columns: &[String], c: &str| columns.iter().any(|h| h.eq_ignore_ascii_case(c));
    let create = D::create_fence_table(&quoted);
    let created = sqlx::query::<D>(&create).execute(&mut *conn).await;
    let columns = fence_columns::<D>(conn, t).await?;
    if columns.is_empty() {
        // Not there even after CREATE: say why.
        created?;
    }
    for column in FENCE_ISSUER_COLUMNS.iter().filter(|c| !has(&columns, c)) {
        let add = D::add_fence_issuer_column(&quoted, column);
        if let Err(e) = sqlx::query::<D>(&add).execute(&mut *conn).await {
            // Another process may have added it in the meantime.
            if !has(&fence_columns::<D>(conn, t).await?, column) {
                return Err(e.into());
            }
        }
    }
    Ok(())
});

with_sqlx_bounds!([async fn fence_columns<D>(conn: &mut D::Connection, t: &TableName) -> Result<Vec<String>, SqlError>] {
    let rows = sqlx::query(D::COLUMNS).bind(t.as_str()).fetch_all(&mut *conn).await?;
    Ok(rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?)
});

/// A database just opened: the first lease connection, how to open more, a
/// lazily connecting pool for the caller's own writes, and the server as it
/// describes itself.
pub(crate) struct Opened<D: Dialect> {
    pub(crate) conn: D::Connection,
    pub(crate) opts: D::Opts,
    pub(crate) pool: sqlx::Pool<D>,
    pub(crate) version: String,
    /// Whether the server waits for synchronous standbys before it
    /// acknowledges a commit (PostgreSQL `synchronous_standby_names`), as
    /// read at connect.
    pub(crate) sync_standbys: bool,
    /// What the URL asked of TLS (a networked engine's).
    pub(crate) tls: Option<crate::tls::Asked>,
}

impl<D: Dialect> Opened<D> {
    /// `conn` and `opts` for the lease operations, and a pool of at most
    /// `max` connections opened lazily with `pool_options`.
    pub(crate) fn new(
        conn: D::Connection,
        opts: D::Opts,
        pool_options: <D::Connection as sqlx::Connection>::Options,
        max: u32,
        version: String,
    ) -> Self {
        let pool = sqlx::pool::PoolOptions::<D>::new()
            .max_connections(max)
            .connect_lazy_with(pool_options);
        Self {
            conn,
            opts,
            pool,
            version,
            sync_standbys: false,
            tls: None,
        }
    }

    /// What the URL asked of TLS.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn tls(mut self, asked: crate::tls::Asked) -> Self {
        self.tls = Some(asked);
        self
    }

    /// Says whether the server waits for synchronous standbys (only
    /// PostgreSQL's can).
    #[cfg(feature = "postgres")]
    pub(crate) fn sync_standbys(mut self, yes: bool) -> Self {
        self.sync_standbys = yes;
        self
    }
}

/// A query of dialect `D` with its binds so far.
pub(crate) type Q<'q, D> = Query<'q, D, <D as sqlx::Database>::Arguments<'q>>;

/// One SQL engine (see the module docs).
pub(crate) trait Dialect: sqlx::Database {
    /// Which engine this is.
    const ENGINE: Engine;
    /// Whether the database is reached over the network (SQLite is a file).
    const NETWORKED: bool;
    /// The identifier quote.
    const QUOTE: char;
    /// Whether an acquisition starts at a random slot and wraps around.
    /// MySQL/MariaDB lock every row a `FOR UPDATE` scan passes over, even the
    /// taken ones it then skips: hundreds of acquirers all scanning from slot 0
    /// is quadratic lock traffic. PostgreSQL (MVCC) and SQLite (one writer)
    /// take the lowest free slot.
    const RANDOM_START: bool;
    /// The server's current time, in the representation of the time columns.
    const NOW: &'static str;
    /// A time long past, in the representation of the time columns: what a
    /// pool's record holds when nothing need be waited for (a pool declared
    /// new).
    const LONG_AGO: &'static str;
    /// Lists the columns of the table named by the one parameter.
    const COLUMNS: &'static str;
    /// The server's clock now, as a `BIGINT` of microseconds since the Unix
    /// epoch: what claims and renewals report as the store's time, so the
    /// driver can catch the store's clock jumping (DESIGN.md rule 11).
    const NOW_MICROS: &'static str;
    /// Whether the renewal is sent as text with literals, followed by a
    /// `SELECT` of the rows it matched and the time (MySQL/MariaDB: no
    /// `UPDATE … RETURNING`); otherwise it binds parameters and `RETURNING`
    /// the time.
    const RENEW_AS_TEXT: bool = false;
    /// The granularity of the expiry the engine stores.
    const RESOLUTION: Duration = Duration::from_micros(1);
    /// The type a `CAST` to text names.
    const TEXT_TYPE: &'static str = "TEXT";
    /// The type of the floor columns (signed 64-bit: Unix milliseconds).
    const FLOOR_TYPE: &'static str = "BIGINT";
    /// The largest value the `fence` column holds (signed 64-bit unless the
    /// engine says otherwise). A slot whose fence is there can never be
    /// handed over with a bigger one (DESIGN.md rule 7), and `fence + 1`
    /// would fail or, in SQLite, turn into a float.
    const MAX_FENCE: &'static str = "9223372036854775807";
    /// The type of the `id_format` column: up to 200 ASCII characters
    /// (`IdFormat::MAX_TEXT`) that compare byte for byte (no case folding,
    /// no trailing-space padding: two formats are the same exactly when
    /// their texts are equal).
    const FORMAT_TYPE: &'static str;

    /// A slot number as bound and as decoded.
    type Slot: for<'q> Encode<'q, Self>
        + for<'r> Decode<'r, Self>
        + Type<Self>
        + TryInto<u32>
        + Send
        + 'static;
    /// A fence as bound and as decoded.
    type Fence: for<'q> Encode<'q, Self>
        + for<'r> Decode<'r, Self>
        + Type<Self>
        + TryInto<u64>
        + Copy
        + fmt::Display
        + Send
        + 'static;
    /// A TTL as bound (see [`Dialect::ttl_param`]).
    type Ttl: for<'q> Encode<'q, Self> + Type<Self> + Send + 'static;
    /// What opening another lease connection takes.
    type Opts: Send + Sync + 'static;

    /// `slot` as bound.
    fn slot(slot: u32) -> Self::Slot;
    /// `fence` as bound; `None` when the column cannot hold it (above
    /// `i64::MAX` where it is signed): two such fences must not compare
    /// equal.
    fn fence(fence: u64) -> Option<Self::Fence>;
    /// `ttl` as bound.
    fn ttl(ttl: Duration) -> Self::Ttl;

    /// The `n`-th statement parameter (from 1).
    fn param(n: usize) -> String;
    /// The `n`-th parameter where it carries a TTL.
    fn ttl_param(n: usize) -> String {
        Self::param(n)
    }
    /// `ttl` as a literal where [`Dialect::ttl_param`] would stand
    /// (microseconds unless the engine says otherwise).
    fn ttl_literal(ttl: Duration) -> String {
        ttl.as_micros().to_string()
    }
    /// The `n`-th parameter where it carries a floor (bound as `i64`).
    fn floor_param(n: usize) -> String {
        Self::param(n)
    }
    /// The restart guard: an SQL expression of the microseconds until this
    /// server may grant again after its last start, so that every lease
    /// granted by the previous run — whose acknowledged writes a server with
    /// lossy settings may have forgotten — has passed its holder's deadline
    /// first: `start + span − now`, at most 0 once grants may resume, where
    /// `span` is an SQL integer expression of microseconds. `None` where no
    /// guard is needed (SQLite: see its dialect). `version` is the server as
    /// it described itself at connect.
    fn resume_in_micros(span: &str, version: &str) -> Option<String>;
    /// The promotion guard's reading of the server's history: an SQL text
    /// expression that changes whenever the server stops being the one whose
    /// writes its clients saw (a standby promoted, a point-in-time restore),
    /// and the value it has on a server that never changed, where the engine
    /// has one. `None` where the engine offers no such reading yet (the
    /// guard is then off). `version` is the server as it described itself
    /// at connect.
    fn incarnation(_version: &str) -> Option<Incarnation> {
        None
    }
    /// An SQL text expression naming the lease table `t` (quoted) as the
    /// server keeps it, which changes when the table is dropped and created
    /// again (a restore of a dump that recreates it), where the engine has
    /// one: each pool's record keeps it, and a record of another table is
    /// no record. `None` where the engine has none.
    fn table_identity(_t: &str) -> Option<String> {
        None
    }
    /// The promotion guard's record statements (`;`-separated), sent ahead
    /// of a claim in its round trip: insert the record (`pool, slot, holder,
    /// acquired_at` = `values`, a comma-separated list of SQL expressions)
    /// where `row` selects none, and replace a record whose `holder` is not
    /// `current` with `current` and now. Neither may write or lock anything
    /// when the record is current: every claim of every pool runs them.
    ///
    /// PostgreSQL judges an `UPDATE`'s `WHERE` on its snapshot and locks
    /// only the rows that match, and `ON CONFLICT DO NOTHING` locks no
    /// committed row.
    fn record_incarnation(t: &str, row: &str, values: &str, current: &str) -> String {
        let insert = Self::insert_missing(
            t,
            "pool, slot, holder, acquired_at",
            &format!("({values})"),
            "pool, slot",
        );
        format!(
            "{insert}; UPDATE {t} SET holder = {current}, acquired_at = {} \
             WHERE {row} AND holder <> {current}",
            Self::NOW
        )
    }
    /// The microseconds from now until `span` microseconds (an SQL integer
    /// expression) after the time column or expression `since`.
    fn micros_until(since: &str, span: &str) -> String {
        Self::micros_between(
            Self::NOW,
            &format!("{since} + ({span}) * INTERVAL '1 microsecond'"),
        )
    }
    /// The select list (text columns) of the settings that decide whether
    /// the server keeps acknowledged writes across a crash (see
    /// [`Dialect::durability_risks`]). `None`: nothing to read (SQLite).
    fn durability_columns(version: &str) -> Option<&'static str>;
    /// What the values of [`Dialect::durability_columns`] risk.
    fn durability_risks(values: &[String]) -> Vec<leasehold_core::DurabilityRisk>;
    /// The microseconds from the time expression `from` to `to` (a `BIGINT`;
    /// NULL when either is NULL).
    fn micros_between(from: &str, to: &str) -> String;
    /// The condition that a row's `floor_ms` is a floor a claim or renewal
    /// can trust: a whole number from 0 (Unix ms). A negative one says
    /// nothing of what earlier holders stamped; claims and renewals refuse
    /// the row and leave it as found (DESIGN.md rule 8).
    fn usable_floor() -> String {
        "floor_ms >= 0".to_owned()
    }
    /// The condition that a row's `fence` can grow: below
    /// [`Dialect::MAX_FENCE`]. Claims refuse a row whose fence cannot.
    fn usable_fence() -> String {
        format!("fence < {}", Self::MAX_FENCE)
    }
    /// The value of the column `expr` as text, for an error that shows what
    /// is stored.
    fn shown(expr: &str) -> String {
        format!("CAST({expr} AS {})", Self::TEXT_TYPE)
    }
    /// The larger of two integer expressions.
    fn greatest(a: &str, b: &str) -> String {
        format!("GREATEST({a}, {b})")
    }
    /// The expiry `ttl` (a parameter or a literal) after now.
    fn expires_after(ttl: &str) -> String;
    /// A token (lower-case hex) as a literal.
    fn token_literal(hex: &str) -> String;
    /// A UTF-8 holder (lower-case hex of its bytes) as a text literal.
    fn holder_literal(hex: &str) -> String;
    /// An ID format's text (lower-case hex of its ASCII bytes) as a literal
    /// of [`Dialect::FORMAT_TYPE`], compared with the `id_format` column
    /// byte for byte.
    fn format_literal(hex: &str) -> String {
        Self::holder_literal(hex)
    }
    /// The `id_format` expression `expr` as text the driver decodes.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    fn format_text(expr: &str) -> String {
        expr.to_owned()
    }
    /// The acquisition as one round trip of plain text: claims the lowest slot
    /// of `pool` that `free` selects with the assignments `set` (see
    /// `Statements::acquire`), and answers its slot, fence,
    /// `grant_floor_ms` and `now` (the server's time, [`Dialect::NOW_MICROS`]).
    /// The row picked is claimed only where `usable` holds (its floor and
    /// fence can be trusted): otherwise nothing is written, and the claim
    /// answers no row, as when no slot is free.
    ///
    /// With `format` (the claim declares an ID format: its
    /// [`Dialect::format_literal`]), in the same transaction: first records
    /// it for the pool (`statements::record_format`), then claims only if
    /// the pool's recorded format is this one, and last answers one more
    /// row of one column, the recorded format as text (NULL when there is
    /// none), so a refusal can name it. A read of the record must see every
    /// committed record (the record never changes once written, so a read
    /// after the record's insert, in a new statement or a locking read, is
    /// what the claim relies on; see `statements::POOL_ROW`).
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        t: &str,
        pool: &str,
        free: &str,
        usable: &str,
        set: &str,
        token: &str,
        now: &str,
        format: Option<&str>,
    ) -> String;
    /// `INSERT` of `values` into `columns` that skips rows whose `key` exists.
    fn insert_missing(t: &str, columns: &str, values: &str, key: &str) -> String {
        format!("INSERT INTO {t} ({columns}) VALUES {values} ON CONFLICT ({key}) DO NOTHING")
    }
    /// The DDL of the lease table `t` (quoted): the 0.1 table of
    /// `migrations/<engine>/0001_leasehold_leases.sql` with the columns the
    /// later migrations add (`0002` floor, `0003` span, `0005` ID format).
    fn create_table(t: &str) -> String;
    /// Adds the integer column `column` (a floor column, or `span_ms`) to the
    /// lease table `t` (quoted): the statements of
    /// `migrations/<engine>/0002_leasehold_floor.sql` and
    /// `0003_leasehold_span.sql`.
    fn add_floor_column(t: &str, column: &str) -> String {
        format!(
            "ALTER TABLE {t} ADD COLUMN {column} {} NOT NULL DEFAULT 0",
            Self::FLOOR_TYPE
        )
    }

    /// Adds the `id_format` column to the lease table `t` (quoted): the
    /// statement of `migrations/<engine>/0005_leasehold_id_format.sql`.
    fn add_format_column(t: &str) -> String {
        format!("ALTER TABLE {t} ADD COLUMN id_format {}", Self::FORMAT_TYPE)
    }

    /// The DDL of the fence table `t` (quoted), with the issuer columns.
    fn create_fence_table(t: &str) -> String;
    /// The type of the issuer column `column` (`pool` or `slot`) of a fence
    /// table.
    fn fence_issuer_type(column: &str) -> &'static str;
    /// Adds the issuer column `column` to the fence table `t` (quoted): the
    /// statements of `migrations/<engine>/0004_leasehold_fence_issuer.sql`.
    fn add_fence_issuer_column(t: &str, column: &str) -> String {
        format!(
            "ALTER TABLE {t} ADD COLUMN {column} {}",
            Self::fence_issuer_type(column)
        )
    }
    /// The fenced write on fence table `t`: an optional statement that makes
    /// sure the resource's row exists (binds the resource), the write itself
    /// and the take-over (bound through [`Dialect::bind_fence_write`]; they
    /// match no row when refused), and the query of the last writer's fence,
    /// pool and slot (binds the resource).
    fn fence_write(t: &str) -> FenceSql;
    /// Binds `resource` and the stamp (`fence`, `pool`, `slot`) to
    /// [`FenceSql::write`], or, with `from` (the pool and slot taken over),
    /// to [`FenceSql::take_over`].
    fn bind_fence_write<'q>(
        q: Q<'q, Self>,
        resource: &'q str,
        stamp: (Self::Fence, &'q str, Self::Slot),
        from: Option<(&'q str, Self::Slot)>,
    ) -> Q<'q, Self>;

    /// Opens the database `config` names and checks the server; with
    /// `creds` (from the config's credential source) in place of the URL's.
    fn open(
        config: &SqlConfig,
        creds: Option<&Credentials>,
    ) -> impl Future<Output = Result<Opened<Self>, SqlError>> + Send;
    /// `opts` (of the lease connections) with `creds` in place of their user
    /// (when `creds` names one) and password.
    fn with_credentials(opts: &Self::Opts, creds: &Credentials) -> Self::Opts;
    /// The caller's pool's options `opts` with `creds`, as
    /// [`Dialect::with_credentials`].
    fn pool_with_credentials(
        opts: &<Self::Connection as sqlx::Connection>::Options,
        creds: &Credentials,
    ) -> <Self::Connection as sqlx::Connection>::Options;
    /// Opens another lease connection.
    fn connect(
        opts: &Self::Opts,
    ) -> impl Future<Output = Result<Self::Connection, sqlx::Error>> + Send + '_;
    /// Classifies an error the server answered with; `msg` describes it.
    fn classify_database(e: &dyn DatabaseError, msg: String) -> Failure;
    /// Whether the server refused a login with `e` (credentials, a missing
    /// TLS connection or client certificate), by its error code.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    fn access_refused(_e: &dyn DatabaseError) -> bool {
        false
    }
    /// Whether the server refused the credentials (a wrong user or
    /// password), and then what to check.
    fn authentication_failed(_e: &dyn DatabaseError) -> Option<&'static str> {
        None
    }
    /// The rows a statement changed (or matched, where sqlx asks for that).
    fn rows_affected(r: &Self::QueryResult) -> u64;
    /// The store's identity for a `url` (see `Strategy::identity`).
    fn identity(url: &str) -> String {
        redact(url)
    }

    /// Classifies a sqlx error, prefixing the message with `what`.
    fn classify(what: &str, e: &sqlx::Error) -> Failure {
        let msg = format!("{what}: {e}");
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Failure::Transient(msg),
            // The password file or the credentials callback did not answer:
            // the next attempt asks again.
            sqlx::Error::Configuration(e) if e.is::<CredentialsFailed>() => Failure::Transient(msg),
            sqlx::Error::Database(db) => Self::classify_database(db.as_ref(), msg),
            sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::TypeNotFound { .. }
            | sqlx::Error::Decode(_) => Failure::Schema(msg),
            _ => Failure::Final(msg),
        }
    }
}

/// A risk: `setting` is `value`, which `loses`; `fix`. (SQLite has none.)
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn risk(
    setting: &str,
    value: &str,
    loses: &str,
    fix: &str,
) -> leasehold_core::DurabilityRisk {
    leasehold_core::DurabilityRisk {
        setting: setting.to_owned(),
        value: value.to_owned(),
        loses: loses.to_owned(),
        fix: fix.to_owned(),
    }
}

/// The statements of a fenced write (see [`Dialect::fence_write`]).
pub(crate) struct FenceSql {
    pub(crate) prepare: Option<String>,
    /// Accepted when the resource's last writer has the stamp's pool and
    /// slot (or is unknown: a new row, or one written before the table had
    /// the issuer columns) and a fence no bigger.
    pub(crate) write: String,
    /// Accepted as `write` is, or when the last writer is the pool and slot
    /// taken over (whatever the fences: they are not comparable).
    pub(crate) take_over: String,
    pub(crate) seen: String,
}

// Records `stamp` for `resource` in the fence table `t` (quoted) on `conn`,
// or refuses (see `FenceTable::advance`); with `from`, takes the resource
// over from that pool and slot (see `FenceTable::take_over`).
with_sqlx_bounds!([async fn fenced_write<D>(
    conn: &mut D::Connection,
    t: &str,
    resource: &str,
    from: Option<(&PoolName, u32)>,
    stamp: &FenceStamp,
) -> Result<(), SqlError>] {
    // Taking a resource over from the stamp's own pool and slot is a plain
    // fenced write: the fences are comparable, and a smaller one is refused.
    let from = from.filter(|(pool, slot)| (*pool, *slot) != (stamp.pool(), stamp.slot()));
    // Rule 7 broken on purpose (the campaign's planted bugs; a constant
    // false otherwise): a take-over from the stamp's own pool and slot
    // accepts any fence of theirs.
    let from = if leasehold_core::plant::active(leasehold_core::plant::Plant::FenceUnchecked) {
        Some((stamp.pool(), stamp.slot()))
    } else {
        from
    };
    let sql = D::fence_write(t);
    let schema = |e: sqlx::Error| match D::classify("a fenced write", &e) {
        Failure::Schema(what) => SqlError::FenceSchema {
            what: format!("the fence table {t} lacks what fenced writes need: {what}"),
            fix: format!(
                "run `FenceTable::ensure` once (it adds the issuer columns pool and slot), or \
                 apply lease-sql/migrations/{}/0004_leasehold_fence_issuer.sql",
                D::ENGINE
            ),
        },
        _ => SqlError::Database(e),
    };
    if let Some(prepare) = &sql.prepare {
        sqlx::query(prepare)
            .bind(resource)
            .execute(&mut *conn)
            .await
            .map_err(schema)?;
    }
    let Some(fence) = D::fence(stamp.fence().0) else {
        return Err(SqlError::Config(leasehold_core::ConfigError::new(
            "fence",
            format!("{} (of {stamp}, for {resource:?})", stamp.fence()),
            format!(
                "a fence the fence table's column holds, at most {} on {}",
                D::MAX_FENCE,
                D::ENGINE
            ),
        )));
    };
    let text = if from.is_some() { &sql.take_over } else { &sql.write };
    let write = D::bind_fence_write(
        sqlx::query(text),
        resource,
        (fence, stamp.pool().as_str(), D::slot(stamp.slot())),
        from.map(|(pool, slot)| (pool.as_str(), D::slot(slot))),
    );
    let done = write.execute(&mut *conn).await.map_err(schema)?;
    if D::rows_affected(&done) > 0 {
        return Ok(());
    }
    let row = sqlx::query(&sql.seen)
        .bind(resource)
        .fetch_one(&mut *conn)
        .await
        .map_err(schema)?;
    let stored: D::Fence = row.try_get(0)?;
    let seen = Fence(stored.try_into().map_err(|_| SqlError::FenceSchema {
        what: format!(
            "the fence table {t} holds the negative fence {stored} for {resource:?}, which \
             every fence passes"
        ),
        fix: "fences are never negative, so something else wrote it: set it to the fence of \
              the resource's last write"
            .to_owned(),
    })?);
    let pool: Option<String> = row.try_get(1)?;
    let slot: Option<D::Slot> = row.try_get(2)?;
    let owner = pool.zip(slot.and_then(|s| s.try_into().ok()));
    match owner {
        Some((pool, slot)) if pool != stamp.pool().as_str() || slot != stamp.slot() => {
            Err(SqlError::OtherWriter {
                resource: resource.to_owned(),
                stamp: stamp.clone(),
                pool,
                slot,
                seen,
            })
        }
        _ => Err(SqlError::Stale {
            resource: resource.to_owned(),
            fence: stamp.fence(),
            seen,
        }),
    }
});

/// Connect-time errors: unreachable (retryable) or misconfigured (final).
pub(crate) async fn guard_connect<D: Dialect, T>(
    url: &str,
    budget: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, SqlError> {
    guarded::<D, T>(format!("connecting to {}", redact(url)), budget, fut).await
}

/// Runs `fut` (`what`, which may open a connection) within `budget`; its
/// errors as connect's: unreachable (retryable) or refused (final).
pub(crate) async fn guarded<D: Dialect, T>(
    what: String,
    budget: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, SqlError> {
    match tokio::time::timeout(budget, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(connect_error::<D>(&what, &e)),
        Err(_) => Err(SqlError::Unreachable(Reason::new(format!(
            "{what}: no answer within {budget:?}"
        )))),
    }
}

/// Opens the first connection of `url` (`fut`) within `budget`: its errors
/// as [`guarded`]'s, or as `tls` explains them (a refused handshake, a
/// server without TLS, a login refused where TLS may be what it wants).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn open_connection<D: Dialect, T>(
    url: &str,
    tls: &crate::tls::Tls,
    budget: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, SqlError> {
    let what = format!("connecting to {}", redact(url));
    match tokio::time::timeout(budget, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            let (refused, authentication) = match &e {
                sqlx::Error::Database(db) => (
                    D::access_refused(db.as_ref()),
                    D::authentication_failed(db.as_ref()).is_some(),
                ),
                _ => (false, false),
            };
            Err(match tls.explain(&what, &e, refused) {
                // The credentials refused: said so, with what TLS may have
                // to do with it.
                Some(SqlError::Refused { what, fix }) if authentication => {
                    SqlError::Authentication {
                        what: format!("authentication failed {what}"),
                        fix,
                    }
                }
                Some(explained) => explained,
                None => connect_error::<D>(&what, &e),
            })
        }
        Err(_) => Err(SqlError::Unreachable(Reason::new(format!(
            "{what}: no answer within {budget:?}"
        )))),
    }
}

/// A connect-time error: unreachable (retryable), the credentials refused
/// or refused otherwise (final).
fn connect_error<D: Dialect>(what: &str, e: &sqlx::Error) -> SqlError {
    if let sqlx::Error::Database(db) = e
        && let Some(fix) = D::authentication_failed(db.as_ref())
    {
        return SqlError::Authentication {
            what: format!("authentication failed {what}: {e}"),
            fix: fix.to_owned(),
        };
    }
    match D::classify(what, e) {
        Failure::Transient(m) | Failure::Contention(m) => SqlError::Unreachable(Reason::new(m)),
        Failure::Schema(m) | Failure::Final(m) => SqlError::Refused {
            what: m,
            fix: "check the database URL, user, password and database name".to_owned(),
        },
        // MariaDB answers a login to a database the user has no privilege
        // in with ER_DBACCESS_DENIED_ERROR.
        Failure::Denied(m) => SqlError::Refused {
            what: m,
            fix: "the user has no privilege in this database: as the admin, give it the grants \
            of a lease user (the crate README, \"Least privilege\"; \
            `leasehold_sql::lease_user_sql`)"
                .to_owned(),
        },
    }
}

/// The first column of the one row `fut` answers, as text: the server version.
pub(crate) async fn version<D: Dialect>(
    url: &str,
    budget: Duration,
    fut: impl Future<Output = Result<D::Row, sqlx::Error>>,
) -> Result<String, SqlError>
where
    usize: sqlx::ColumnIndex<D::Row>,
    String: for<'r> Decode<'r, D> + Type<D>,
{
    use sqlx::Row;
    guard_connect::<D, _>(url, budget, fut)
        .await?
        .try_get(0)
        .map_err(|e| bad_url(url, &e))
}

/// An URL sqlx cannot use.
pub(crate) fn bad_url(url: &str, e: &dyn fmt::Display) -> SqlError {
    SqlError::Config(leasehold_core::ConfigError::new(
        "url",
        format!("{} ({e})", redact(url)),
        "a URL like postgres://user@host/db, mysql://user@host/db or \
         sqlite://path/to/file.sqlite (or a plain file path)",
    ))
}

/// A server without a feature the statements rely on.
pub(crate) fn unsupported(what: String, fix: &str) -> SqlError {
    SqlError::UnsupportedServer {
        what,
        fix: fix.to_owned(),
    }
}

/// The budget of a connect: twice the operation timeout, at least 2 s.
pub(crate) fn connect_budget(op: Duration) -> Duration {
    op.max(Duration::from_secs(1)) * 2
}

pub(crate) use leasehold_core::url::redacted as redact;

/// The credential source did not answer when a lease connection needed it
/// (carried in `sqlx::Error::Configuration`, classified as transient).
#[derive(Debug)]
pub(crate) struct CredentialsFailed {
    /// The database, its URL redacted.
    pub(crate) store: String,
    pub(crate) error: leasehold_core::credentials::CredentialsError,
}

impl fmt::Display for CredentialsFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot connect to {}: {}", self.store, self.error)
    }
}

impl std::error::Error for CredentialsFailed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact("postgres://u:secret@h:5/db?sslmode=require&password=secret"),
            "postgres://u:***@h:5/db?sslmode=require&password=***"
        );
        assert_eq!(
            redact("mysql://root@127.0.0.1:3306/x"),
            "mysql://root@127.0.0.1:3306/x"
        );
        assert_eq!(redact("postgres://h"), "postgres://h");
    }
}

/// What [`Dialect::incarnation`] reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Incarnation {
    /// An SQL text expression of the server's current history.
    pub(crate) current: &'static str,
    /// Its value on a server that was never promoted nor restored, where
    /// the engine has one (PostgreSQL's timeline 1): the one incarnation a
    /// table may meet without a record of an earlier one; a record missing
    /// on another is created as if that incarnation had just begun. `None`
    /// (MySQL/MariaDB: a server ID says nothing of the server's past): a
    /// missing record is created as long past, since a table whose record
    /// is missing has had no claim that its server kept (each claim writes
    /// the record before it claims). The limit: a table whose first claim
    /// was still in the replication lag at a failover.
    pub(crate) first: Option<&'static str>,
    /// A timestamp literal long past, recorded as the start of an
    /// incarnation that nothing waits for.
    pub(crate) long_ago: &'static str,
}
