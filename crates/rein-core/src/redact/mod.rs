//! Redaction: the secrets rein holds never leave it in clear.
//!
//! # What counts as a secret
//!
//! rein knows every secret it holds, because it put each one there:
//! provider keys, credential-bearing headers and command variables,
//! credentials in URLs (userinfo, `${VAR}`s in a path or query), and the
//! SHA-256 digests of `[[server.api_keys]]`. Which values those are is
//! decided by name and place, not by "came from `${VAR}`" — a host, a
//! port, a base URL or an `Accept` header is not a secret
//! ([`is_credential_name`], [`header_secrets`], [`env_secrets`],
//! [`url_secrets`]):
//!
//! | where the value is | secret? |
//! | --- | --- |
//! | a provider's key (`api_key_env`) | yes |
//! | a header named for a credential ([`is_credential_name`]: `Authorization`, `Proxy-Authorization`, `Cookie`, `*-Key`, `*-Token`, `*-Secret`, `Api-Key`, …), written literally or from `${VAR}` | the value, the credential after its scheme (`Bearer abc` → `abc`), and for `Basic` the decoded `user:pass` and password |
//! | any other header (`Accept`, `X-Env`) | no |
//! | a command's `env` variable named for a credential (`API_KEY`, `GITHUB_TOKEN`, `DB_PASSWORD`) | yes |
//! | a URL's userinfo (`https://user:pass@host`), literal or not | the userinfo, the password, `user:pass`, and its base64 (the `Basic` header a client builds from it) |
//! | a `${VAR}` supplying a URL's host, port or origin (`http://${HOST}:${PORT}/x`, `${ORIGIN}/x`) | no: that says *where*, not *who* |
//! | a `${VAR}` supplying a base URL (`${BASE}/chat` with `https://api.example.com/v1`) | only its path segments that look like tokens (20+ letters and digits, mixed case or 32+ long: `/services/T0/B0/XXXXXXXXXXXXXXXXXXXXXXXX`) |
//! | a `${VAR}` inside a URL's path (`/bot${TOKEN}/send`) | yes: a path token is a credential |
//! | a `${VAR}` inside a URL's query (`?key=${KEY}`) | yes (and every query is scrubbed by shape anyway) |
//!
//! A value found by its place in a URL and shorter than
//! [`MIN_SECRET_CHARS`] is not a credential (`/${VERSION}/` = `v1`) and
//! is skipped silently; a credential-named
//! value that short is reported ([`Candidate::warn_if_short`]), because
//! it cannot be redacted.
//!
//! ## Why by name and place
//!
//! Treating every interpolated value as a secret made `HOST=localhost`
//! erase the host from every error and access-log line, warned about
//! `PORT=8080` being "too short" on every start, and scrubbed `X-Env:
//! production` everywhere. A credential announces itself by the header or
//! variable it travels in, or by the URL part that carries it.
//!
//! ## By shape
//!
//! Besides those values, every **URL query string** and **userinfo** is a
//! secret by shape (`?api_key=…`, `https://user:pass@host`) in prose:
//! tokens travel there, and rein cannot know which parameter is one.
//!
//! A secret is replaced by [`REDACTED`]; a query by `?[redacted]`; userinfo
//! by `[redacted]@`. The rest of the text stays, so an upstream's error body
//! is still useful to a human. A secret is found in any encoding it took on
//! the way (percent-encoded wholly or partly, JSON- or `Debug`-escaped; see
//! [`Redactor`]).
//!
//! # Short values
//!
//! A value shorter than [`MIN_SECRET_CHARS`] (8) characters is not
//! redacted: replacing every `a` or `test` in every text would ruin the
//! text and protect nothing (a secret that short is guessable anyway).
//! [`Secrets::insert`] refuses it with [`SecretTooShort`], and `rein check`
//! prints a warning naming the field, so an operator learns it.
//!
//! # Where redaction happens, and why there
//!
//! External text becomes rein text in a few places, and each has one type
//! or one function every such text goes through; redaction sits inside it,
//! so a new caller cannot forget it:
//!
//! | funnel | what passes through it | how |
//! | --- | --- | --- |
//! | [`Failure::with_human_message`](crate::Failure::with_human_message) | every tool, provider and transport error: HTTP bodies, reqwest errors naming URLs, command stderr; from it, ledger rows, gateway errors | prose |
//! | [`truncated`] / [`tail`] / [`cut`] | every cut of outside text (an error body kept to 300 characters, the end of stderr): redacted *before* it is cut | prose |
//! | [`ConfigProblem::new`](crate::registry::ConfigProblem::new) | everything `rein check` (and a refused start) prints | prose |
//! | [`report::derive`](crate::report::derive) | every run report: stored, `GET /v1/runs/{id}`, `/handoff`, `rein run`'s output | prose; results, answer and task: known secrets only |
//! | the engine's tool adapters | every tool result, before the ledger, the checkpoint or the model sees it | known secrets only |
//! | the engine's event emitter | every event, before the live observer, metrics and the store see it | prose |
//! | the server's problem rendering | every HTTP error body | prose |
//! | `rein_engine::log::RedactingWriter` | every log line, whatever crate wrote it (JSON lines field by field, so they stay JSON) | prose |
//! | `rein_engine::log::install_panic_hook` | every panic message | prose |
//!
//! "Known secrets only" keeps URL queries: a tool result may hold a
//! presigned URL that a compensation or the caller needs. Call arguments
//! are exempt altogether: the idempotency key is a digest of them and a
//! resume replays them, so they are stored byte for byte. A known secret
//! can reach them only from the task the caller wrote — nothing rein sends
//! the model (results, errors) carries one — and every text shown from
//! them (events, reports) is redacted at its own sink.
//!
//! What is stored is redacted when it is written; reading it back never
//! redacts again.
//!
//! # Why process-wide, and not an injected redactor
//!
//! This is global mutable state, and it is so on purpose. The secrets are
//! a property of the process — its environment and the config it loaded —
//! just as the log subscriber and the panic hook are, and the sinks that
//! must redact have no handle to thread a redactor through: a log line is
//! written by any crate through `tracing`, a panic message by the standard
//! library's hook, a [`Failure`](crate::Failure) is built in a hundred
//! places (an injected redactor would be a parameter of every one of them,
//! which is exactly the scattered call a new site forgets). So loading a
//! config registers its secrets once, and the funnels read them.
//!
//! What keeps the global honest:
//!
//! - it only grows: nothing is ever un-redacted, and a process that loads
//!   several configs (a test binary) redacts the union;
//! - one lock holds both the secrets and the redactor built from them, so
//!   a reader never sees one without the other;
//! - it is read where text is *written* (a failure made, an event
//!   emitted, a report derived, a line logged), never where stored text is
//!   *read back*: a stored [`Failure`](crate::Failure) deserializes to the
//!   same value whatever was registered since;
//! - the pure [`Redactor`] does the work and is what unit tests drive;
//!   tests of the global use canaries no other test uses, so their order
//!   does not matter.

mod classify;
mod matcher;
mod probe;
mod process;
mod report;
mod secrets;
mod urls;

pub use classify::{
    Candidate, env_secrets, header_secrets, is_credential_name, shown, shown_url, url_secrets,
};
pub use matcher::Redactor;
pub use probe::would_change;
pub use process::{
    cut, json, json_changes, json_strings, known, known_json, process, register, tail, text,
    truncated,
};
pub(crate) use report::report;
pub use secrets::{SecretTooShort, Secrets};
pub use urls::scrub_urls;

/// What a secret is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The shortest value redacted, in characters; see the module docs.
pub const MIN_SECRET_CHARS: usize = 8;
