//! TLS to PostgreSQL: libpq's `sslmode` values, spoken with rustls.
//!
//! # Why rustls, and a connector of rein's own
//!
//! A managed PostgreSQL (RDS, Cloud SQL, Neon) is reached over a network
//! rein does not own, so it must be spoken to over TLS. rustls (on `ring`)
//! is already in the build for the model client, so TLS here adds no C
//! library and no OpenSSL. The glue `tokio-postgres` needs (its
//! `MakeTlsConnect`) is the hundred lines of [`Connector`] over
//! `tokio-rustls`, rather than `tokio-postgres-rustls`: that crate would
//! bring an X.509 parser for channel binding and still leave the `sslmode`
//! semantics below to rein, since the driver only knows `disable`,
//! `prefer` and `require`.
//!
//! # What each `sslmode` does (as libpq)
//!
//! | `sslmode` | TLS | certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it | not verified |
//! | `require` | always | not verified, unless a CA is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by the CA |
//! | `verify-full` | always | signed by the CA and naming the host of the URL |
//!
//! The CA is `sslrootcert=PATH` of the URL (a PEM file), `sslrootcert=system`
//! (the Mozilla roots built into rein, for a server with a public
//! certificate), or the `[store] ca_file` setting ([`PostgresOptions`]);
//! the URL's wins. What rein does not do is refused by name, never ignored:
//! `sslmode=allow`, client certificates (`sslcert`, `sslkey`,
//! `sslpassword`), revocation lists (`sslcrl`, `sslcrldir`) and the other
//! `ssl…` parameters; a CA with `disable` or `prefer`, which never verify.
//!
//! Channel binding (`SCRAM-SHA-256-PLUS`) is not offered: authentication
//! uses `SCRAM-SHA-256` inside the verified TLS session.
//!
//! [`PostgresOptions`]: crate::PostgresOptions

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rein_store::StoreError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// libpq's `sslmode`, the values rein speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plain connections only.
    Disable,
    /// TLS when the server offers it, its certificate not verified.
    #[default]
    Prefer,
    /// TLS always, its certificate not verified (unless a CA is given).
    Require,
    /// TLS always, the certificate signed by the CA.
    VerifyCa,
    /// TLS always, the certificate signed by the CA and naming the host.
    VerifyFull,
}

impl SslMode {
    /// The URL's value.
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// What the driver is told: it knows no verification, only whether
    /// TLS is optional.
    pub(crate) fn driver(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// Where the certificates a server's must chain to come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The Mozilla roots built into rein (`sslrootcert=system`).
    System,
}

/// The TLS parameters of a URL: `sslmode` and `sslrootcert`, the only two
/// `ssl…` parameters rein takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsParams {
    /// `sslmode` (libpq's default, `prefer`, when absent).
    pub mode: SslMode,
    /// `sslrootcert`.
    pub root_certs: Option<RootCerts>,
}

/// The `ssl…` parameters that are refused, and why.
const REFUSED: &[(&str, &str)] = &[
    ("sslcert", "client certificates are not supported"),
    ("sslkey", "client certificates are not supported"),
    ("sslpassword", "client certificates are not supported"),
    ("sslcertmode", "client certificates are not supported"),
    ("sslcrl", "certificate revocation lists are not supported"),
    (
        "sslcrldir",
        "certificate revocation lists are not supported",
    ),
];

impl TlsParams {
    /// Takes `sslmode` and `sslrootcert` out of a URL's query (`a=1&b=2`,
    /// percent-encoded): the parameters, and the query left for the driver
    /// (its own `sslmode`, [`SslMode::driver`], appended).
    ///
    /// # Errors
    ///
    /// A message naming the parameter, for an `sslmode` rein does not
    /// speak and for every other `ssl…` parameter but `sslnegotiation`
    /// (which the driver honours).
    pub(crate) fn split(query: &str) -> Result<(TlsParams, String), String> {
        let mut params = TlsParams::default();
        let mut rest: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key);
            let value = decode(value);
            match key.as_str() {
                "sslmode" => {
                    params.mode = SslMode::parse(&value).ok_or_else(|| {
                        format!(
                            "sslmode={value} is not supported: use disable, prefer, require, \
                             verify-ca or verify-full"
                        )
                    })?;
                }
                "sslrootcert" if value.is_empty() => {
                    return Err("sslrootcert is empty: give a PEM file's path or system".into());
                }
                "sslrootcert" if value == "system" => params.root_certs = Some(RootCerts::System),
                "sslrootcert" => params.root_certs = Some(RootCerts::File(PathBuf::from(value))),
                "sslnegotiation" => rest.push(pair),
                key if key.starts_with("ssl") => {
                    let why = REFUSED
                        .iter()
                        .find(|(refused, _)| *refused == key)
                        .map_or("this parameter is not supported", |(_, why)| why);
                    return Err(format!("{key}: {why} (rein takes sslmode and sslrootcert)"));
                }
                _ => rest.push(pair),
            }
        }
        let driver = match params.mode.driver() {
            tokio_postgres::config::SslMode::Disable => "disable",
            tokio_postgres::config::SslMode::Prefer => "prefer",
            _ => "require",
        };
        let sslmode = format!("sslmode={driver}");
        rest.push(&sslmode);
        Ok((params, rest.join("&")))
    }

    /// The connector for these parameters, with `ca_file` (`[store]
    /// ca_file`) as the CA when the URL names none: reads and checks the
    /// CA, connects to nothing (so `rein check` calls it too).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a CA with `disable` or `prefer` (which
    /// never verify), for `verify-ca` or `verify-full` without a CA, and
    /// for a CA file that cannot be read or holds no certificate.
    pub fn connector(&self, ca_file: Option<&Path>) -> Result<Connector, StoreError> {
        let roots = match (&self.root_certs, ca_file) {
            (Some(roots), _) => Some(roots.clone()),
            (None, Some(file)) => Some(RootCerts::File(file.to_path_buf())),
            (None, None) => None,
        };
        let named = if self.root_certs.is_some() {
            "postgres url sslrootcert"
        } else {
            "store ca_file"
        };
        let invalid = |expected: String, found: String| StoreError::Invalid {
            what: named,
            expected,
            found,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, roots) {
            (SslMode::Disable, None) => return Ok(Connector::plain()),
            (SslMode::Disable | SslMode::Prefer, Some(roots)) => {
                return Err(invalid(
                    "sslmode=verify-full, verify-ca or require in the URL: disable and prefer \
                     never verify a certificate, so a CA would have no effect"
                        .to_owned(),
                    format!("{} with sslmode={}", shown(&roots), self.mode),
                ));
            }
            (SslMode::Prefer | SslMode::Require, None) => {
                Arc::new(Unverified(provider.signature_verification_algorithms))
            }
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                return Err(StoreError::Invalid {
                    what: "postgres url sslmode",
                    expected: "a CA to verify the server against: sslrootcert=PATH (a PEM \
                               file) or sslrootcert=system in the URL, or [store] ca_file"
                        .to_owned(),
                    found: format!("sslmode={} without one", self.mode),
                });
            }
            (mode, Some(roots)) => {
                let store = root_store(&roots).map_err(|why| {
                    invalid("a readable PEM file of CA certificates".to_owned(), why)
                })?;
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                        .build()
                        .map_err(|e| {
                            invalid(
                                "CA certificates rustls accepts".to_owned(),
                                format!("{}: {e}", shown(&roots)),
                            )
                        })?;
                if mode == SslMode::VerifyFull {
                    webpki
                } else {
                    // `require` with a CA verifies it, as libpq does.
                    Arc::new(AnyName(webpki))
                }
            }
        };
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Backend(format!("postgres tls: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // PostgreSQL 17's direct negotiation (`sslnegotiation=direct`)
        // requires it; older servers ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(Connector {
            config: Some(Arc::new(config)),
        })
    }
}

/// `roots` as messages show it.
fn shown(roots: &RootCerts) -> String {
    match roots {
        RootCerts::File(path) => path.display().to_string(),
        RootCerts::System => "sslrootcert=system".to_owned(),
    }
}

/// The trust anchors `roots` names.
fn root_store(roots: &RootCerts) -> Result<RootCertStore, String> {
    let path = match roots {
        RootCerts::System => {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            });
        }
        RootCerts::File(path) => path,
    };
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("{shown}: {e}"))?;
        store
            .add(cert)
            .map_err(|e| format!("{shown}: a certificate rustls cannot use: {e}"))?;
    }
    if store.is_empty() {
        return Err(format!("{shown}: no PEM certificate in it"));
    }
    Ok(store)
}

/// libpq's `require` and `prefer`: the session is encrypted, the server's
/// certificate taken as it comes (its handshake signature still checked,
/// so the session key is the certificate's).
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// libpq's `verify-ca`: the chain to the CA is verified, the name in the
/// certificate is not (a server reached by an address its certificate
/// does not list, behind a proxy or by IP).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The driver's TLS connector for one URL: its rustls configuration, or
/// none for `sslmode=disable`. Cheap to clone (the pool clones it for
/// each connection).
#[derive(Clone)]
pub struct Connector {
    config: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("tls", &self.config.is_some())
            .finish()
    }
}

impl Connector {
    /// No TLS: the driver is never asked for it (`sslmode=disable`).
    fn plain() -> Connector {
        Connector { config: None }
    }
}

impl<S> MakeTlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, io::Error> {
        // The driver asks for a connector before it knows whether TLS is
        // spoken, with "" for a Unix socket (where the server declines
        // TLS): a missing name fails only a handshake that needs it.
        Ok(Connect {
            config: self.config.clone(),
            name: ServerName::try_from(domain.to_owned()).ok(),
        })
    }
}

/// One connection's handshake.
pub struct Connect {
    config: Option<Arc<ClientConfig>>,
    name: Option<ServerName<'static>>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Stream<S>, io::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self.config.ok_or_else(|| {
                io::Error::new(io::ErrorKind::Unsupported, "TLS is off (sslmode=disable)")
            })?;
            let name = self.name.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the host is not a DNS name or an IP address a certificate can name",
                )
            })?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(Stream(Box::new(stream)))
        })
    }
}

/// A TLS session to the server.
pub struct Stream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// `text` percent-decoded (as the driver decodes a URL's parameters).
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_and_the_driver_told_what_it_knows() {
        let (params, rest) =
            TlsParams::split("connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem")
                .unwrap();
        assert_eq!(params.mode, SslMode::VerifyFull);
        assert_eq!(
            params.root_certs,
            Some(RootCerts::File(PathBuf::from("/etc/ca.pem")))
        );
        assert_eq!(rest, "connect_timeout=5&sslmode=require");
        let (params, rest) = TlsParams::split("").unwrap();
        assert_eq!(params, TlsParams::default());
        assert_eq!(rest, "sslmode=prefer");
        let (params, _) = TlsParams::split("sslrootcert=system&sslmode=verify-ca").unwrap();
        assert_eq!(params.root_certs, Some(RootCerts::System));
    }

    #[test]
    fn what_rein_does_not_speak_is_refused_by_name() {
        for (query, named) in [
            ("sslmode=allow", "sslmode=allow"),
            ("sslmode=verify", "sslmode=verify"),
            (
                "sslmode=require&sslcert=/c.pem",
                "sslcert: client certificates",
            ),
            ("sslkey=/k.pem", "sslkey: client certificates"),
            ("sslcrl=/crl.pem", "sslcrl: certificate revocation"),
            ("sslsni=0", "sslsni: this parameter is not supported"),
            ("sslrootcert=", "sslrootcert is empty"),
        ] {
            let error = TlsParams::split(query).unwrap_err();
            assert!(error.contains(named), "{query}: {error}");
        }
    }

    #[test]
    fn a_ca_must_have_a_mode_that_verifies_and_a_verifying_mode_a_ca() {
        let params = |query: &str| TlsParams::split(query).unwrap().0;
        let error = params("sslmode=prefer")
            .connector(Some(Path::new("/ca.pem")))
            .unwrap_err()
            .to_string();
        assert!(error.contains("store ca_file"), "{error}");
        assert!(error.contains("never verify"), "{error}");
        let error = params("sslmode=verify-full")
            .connector(None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("sslrootcert=PATH"), "{error}");
        let error = params("sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
            .connector(None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
        assert!(error.contains("sslrootcert"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = params("sslmode=verify-full")
            .connector(Some(&empty))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
        assert!(params("sslmode=disable").connector(None).is_ok());
        assert!(params("sslmode=require").connector(None).is_ok());
        assert!(
            params("sslmode=verify-full&sslrootcert=system")
                .connector(None)
                .is_ok()
        );
    }
}
