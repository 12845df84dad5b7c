//! The PostgreSQL URL a store is opened with: checked before anything
//! connects, and shown only without its credentials.

use std::fmt;

use rein_core::redact::{Secrets, register, scrub_urls};
use rein_store::StoreError;

use crate::tls::{Connector, TlsParams};

/// Whether `data` names a PostgreSQL database (`postgres://…` or
/// `postgresql://…`) rather than a SQLite file.
pub fn is_postgres_url(data: &str) -> bool {
    data.starts_with("postgres://") || data.starts_with("postgresql://")
}

/// A checked PostgreSQL URL.
///
/// `Debug` and `Display` show it with its userinfo and query replaced
/// (`postgres://[redacted]@db:5432/rein`): the password, and any
/// parameter, never reach a log or an error.
#[derive(Clone)]
pub struct PostgresUrl {
    url: String,
    config: tokio_postgres::Config,
    tls: TlsParams,
}

impl PostgresUrl {
    /// Parses and checks `url`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] (naming the URL without its credentials)
    /// for a URL that is not `postgres://…`, that the driver cannot parse,
    /// that names no database, or whose `ssl…` parameters ask for what
    /// rein does not do (see [`crate::tls`]: `sslmode=allow`, client
    /// certificates, …), naming the parameter.
    pub fn parse(url: &str) -> Result<PostgresUrl, StoreError> {
        let shown = scrub_urls(url).into_owned();
        let invalid = |expected: &str, found: String| StoreError::Invalid {
            what: "postgres url",
            expected: expected.to_owned(),
            found,
        };
        if !is_postgres_url(url) {
            return Err(invalid(
                "a postgres:// or postgresql:// URL with a host, an optional port and a database",
                shown,
            ));
        }
        // The driver knows neither `verify-ca`/`verify-full` nor
        // `sslrootcert`: it is given the URL without them.
        let (head, query) = url.split_once('?').unwrap_or((url, ""));
        let (tls, query) = TlsParams::split(query).map_err(|why| {
            invalid(
                "TLS parameters rein speaks: sslmode (disable, prefer, require, verify-ca, \
                 verify-full) and sslrootcert",
                format!("{shown} ({why})"),
            )
        })?;
        let driver_url = format!("{head}?{query}");
        let config: tokio_postgres::Config = driver_url.parse().map_err(|error| {
            invalid(
                "a postgres:// or postgresql:// URL with a host, an optional port and a database",
                format!("{shown} ({error})"),
            )
        })?;
        if config.get_dbname().is_none_or(str::is_empty) {
            return Err(invalid("a URL naming its database (…/rein)", shown));
        }
        if let Some(password) = config.get_password() {
            // Taught to the process's redactor, so that a driver error
            // quoting it (none should) is still clean.
            let mut secrets = Secrets::new();
            if secrets.insert(&String::from_utf8_lossy(password)).is_ok() {
                register(&secrets);
            }
        }
        Ok(PostgresUrl {
            url: url.to_owned(),
            config,
            tls,
        })
    }

    /// The driver's configuration: what `tokio-postgres` is given, with
    /// the TLS parameters it does not know (`verify-ca`, `verify-full`,
    /// `sslrootcert`) taken out; connect with [`PostgresUrl::connector`].
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The URL's TLS parameters (`sslmode`, `sslrootcert`).
    pub fn tls(&self) -> &TlsParams {
        &self.tls
    }

    /// The driver's TLS connector for this URL, with `ca_file` (`[store]
    /// ca_file`) as the CA when the URL names none. Connects to nothing.
    ///
    /// # Errors
    ///
    /// As [`TlsParams::connector`].
    pub fn connector(&self, ca_file: Option<&std::path::Path>) -> Result<Connector, StoreError> {
        self.tls.connector(ca_file)
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        self.config.get_dbname().unwrap_or_default()
    }

    /// The URL with another database in place of this one's (the scratch
    /// databases of tests, made from the server's `postgres` database).
    ///
    /// # Errors
    ///
    /// As [`PostgresUrl::parse`], for a name that makes the URL invalid.
    pub fn with_database(&self, database: &str) -> Result<PostgresUrl, StoreError> {
        let (head, tail) = match self.url.split_once('?') {
            Some((head, query)) => (head, format!("?{query}")),
            None => (self.url.as_str(), String::new()),
        };
        let base = head.rsplit_once('/').map_or(head, |(base, _)| base);
        PostgresUrl::parse(&format!("{base}/{database}{tail}"))
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&scrub_urls(&self.url))
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PostgresUrl")
            .field(&scrub_urls(&self.url))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_url_shows_without_its_password() {
        let url =
            PostgresUrl::parse("postgres://rein:hunter2-secret@db.internal:5433/rein").unwrap();
        assert_eq!(url.database(), "rein");
        for shown in [url.to_string(), format!("{url:?}")] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("db.internal:5433/rein"), "{shown}");
        }
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason_and_no_password() {
        for (url, reason) in [
            (
                "mysql://u:pw-secret-1@h/db",
                "a postgres:// or postgresql:// URL",
            ),
            ("postgres://u:pw-secret-1@h:notaport/db", "invalid"),
            ("postgres://u:pw-secret-1@h:5432/", "naming its database"),
            (
                "postgres://u:pw-secret-1@h/db?sslmode=require&sslcert=/c.pem",
                "sslcert: client certificates are not supported",
            ),
            (
                "postgres://u:pw-secret-1@h/db?sslmode=allow",
                "sslmode=allow is not supported",
            ),
        ] {
            let error = PostgresUrl::parse(url).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("pw-secret-1"), "{url}: {error}");
        }
    }

    #[test]
    fn another_database_keeps_host_credentials_and_parameters() {
        let url = PostgresUrl::parse("postgres://root@127.0.0.1:5432/postgres?connect_timeout=5")
            .unwrap();
        let other = url.with_database("rein_test_1").unwrap();
        assert_eq!(other.database(), "rein_test_1");
        assert_eq!(
            other.config().get_connect_timeout(),
            url.config().get_connect_timeout()
        );
        assert_eq!(other.config().get_user(), Some("root"));
    }
}
