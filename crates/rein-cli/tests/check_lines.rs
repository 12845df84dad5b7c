//! `rein check` names the file, the line and the column of every problem,
//! whichever step found it: a value refused by the integrity check, in a
//! table, an inline table or an array of tables; a required field that is
//! missing (its table's header); a type error; an unset `${ENV}`.
//! Run as a real process against real files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn rein_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .arg("check")
        .args(args)
        .env_remove("CHECK_LINES_UNSET")
        .output()
        .expect("the rein binary runs")
}

/// One file with a problem of each shape, each on a line the test names.
const ONE_FILE: &str = r#"# rein check names the line of every problem.
[providers.s]
kind = "scripted"
script = "s.json"

[resource_groups.api]

[tools.lookup]
description = "Look an order up."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "orders"
schema = { type = "object", properties = { id = { type = "string", description = "e.g. A-1" } } }
adapter = { kind = "http", url = "http://127.0.0.1:9/lookup" }
[tools.lookup.latency]
p99 = "100ms"
samples = 100
allowance_factor = 20.0

[tools.notify]
# no description: required, reported at the table's header
class = "read"
resource_group = "api"
side_effect_tier = "none"
schema = { type = "object", properties = {} }
latency = { mode = "observe", fallback_p99 = "2s", min_samples = 0 }
adapter = { kind = "http", url = "http://127.0.0.1:9/notify" }

[agents.a]
provider = "s"
model = "m"
tools = ["lookup", "notify"]

[[server.api_keys]]
tenant = "acme"
sha256 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

[[server.api_keys]]
sha256 = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
"#;

/// The `FILE:LINE:COLUMN: FIELD` prefix of each problem line of `stderr`
/// (the last line is the count).
fn places(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|line| !line.starts_with("error: ") && !line.starts_with("warning: "))
        .map(|line| {
            // FILE:LINE:COLUMN: FIELD: MESSAGE — the FILE holds no ": ".
            let mut parts = line.splitn(3, ": ");
            let file = parts.next().unwrap_or_default();
            let field = parts.next().unwrap_or_default();
            format!("{file}: {field}")
        })
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn check_names_the_line_of_each_problem_in_tables_inline_tables_and_arrays_of_tables() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"text": "done"}]}"#,
    )
    .unwrap();
    let file = write(dir.path(), "rein.toml", ONE_FILE);
    let out = rein_check(&[&file]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut got = places(&stderr);
    got.sort();
    let mut want = vec![
        // Missing fields of a declared profile: the sub-table's header.
        format!("{file}:16:1: tools.lookup.latency.p50"),
        format!("{file}:16:1: tools.lookup.latency.p95"),
        // A bad value under the `[tools.lookup.latency]` header.
        format!("{file}:19:1: tools.lookup.latency.allowance_factor"),
        // A missing required field: its table's header.
        format!("{file}:21:1: tools.notify.description"),
        // A bad value inside an inline table: its key's column.
        format!("{file}:27:52: tools.notify.latency.min_samples"),
        // A missing field of the second `[[server.api_keys]]`: its header.
        format!("{file}:39:1: server.api_keys[1].tenant"),
    ];
    want.sort();
    assert_eq!(got, want, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{file}:19:1: tools.lookup.latency.allowance_factor: must be"
        )),
        "the message follows the place: {stderr}"
    );
}

#[test]
fn check_names_lines_across_files_and_json_carries_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"text": "done"}]}"#,
    )
    .unwrap();
    let tools = write(
        dir.path(),
        "10-tools.toml",
        r#"[resource_groups.api]

[tools.lookup]
# no description: required, reported at the table's header
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "orders"
schema = { type = "object", properties = {} }
adapter = { kind = "http", url = "${CHECK_LINES_UNSET}/lookup" }

[tools.other]
description = "Another."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "orders"
schema = { type = "object", properties = {} }
adapter = { kind = "http", url = "http://127.0.0.1:9/x" }
  [tools.other.latency]
  p99 = "100ms"
  samples = "many"
"#,
    );
    let agents = write(
        dir.path(),
        "20-agents.toml",
        r#"[providers.s]
kind = "scripted"
script = "s.json"

[agents.a]
provider = "s"
model = "m"
tools = ["lookup"]
budget = { max_steps = 0 }
"#,
    );
    let config = dir.path().to_str().unwrap();

    let out = rein_check(&[config]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut got = places(&stderr);
    got.sort();
    let mut want = vec![
        // A missing field: the header of the table it belongs in.
        format!("{tools}:3:1: tools.lookup.description"),
        // An unset variable, in an inline table: where `url` is written.
        format!("{tools}:10:28: tools.lookup.adapter.url"),
        // A type error, under an indented header: at its key.
        format!("{tools}:22:3: tools.other.latency.samples"),
        // And, in the same pass, what the rest of that table lacks: a
        // declared profile's p50 and p95, at its header.
        format!("{tools}:20:3: tools.other.latency.p50"),
        format!("{tools}:20:3: tools.other.latency.p95"),
        // A zero in an inline table of the other file.
        format!("{agents}:9:12: agents.a.budget.max_steps"),
    ];
    want.sort();
    assert_eq!(got, want, "{stderr}");

    let out = rein_check(&[config, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: Vec<(String, u64, u64)> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["field"].as_str().unwrap().to_owned(),
                p["line"].as_u64().unwrap_or_else(|| panic!("a line: {p}")),
                p["column"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("a column: {p}")),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("agents.a.budget.max_steps".to_owned(), 9, 12),
            ("tools.lookup.adapter.url".to_owned(), 10, 28),
            ("tools.lookup.description".to_owned(), 3, 1),
            ("tools.other.latency.p50".to_owned(), 20, 3),
            ("tools.other.latency.p95".to_owned(), 20, 3),
            ("tools.other.latency.samples".to_owned(), 22, 3),
        ],
        "{doc:#}"
    );
}

/// A problem about what is not written in the file keeps no line: the
/// address `--listen` gave, not the `server.listen` the file holds.
#[test]
fn check_gives_no_line_to_what_a_flag_gave() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"text": "done"}]}"#,
    )
    .unwrap();
    let file = write(
        dir.path(),
        "rein.toml",
        "[providers.s]\nkind = \"scripted\"\nscript = \"s.json\"\n\
         [agents.a]\nprovider = \"s\"\nmodel = \"m\"\n\
         [server]\nlisten = \"0.0.0.0:8787\"\n",
    );
    let out = rein_check(&[&file, "--serve"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{file}:8:1: server.listen: is 0.0.0.0:8787")),
        "{stderr}"
    );
    let out = rein_check(&[&file, "--listen", "0.0.0.0:9"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{file}: server.listen: is 0.0.0.0:9 (given by --listen)"
        )),
        "{stderr}"
    );
}

/// In a directory config whose `[breakers]` is not in the `[server]`
/// file, a refused breaker setting names the breakers' file and line.
#[test]
fn a_breakers_refusal_names_its_own_file_in_a_directory_config() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"text": "done"}]}"#,
    )
    .unwrap();
    write(
        dir.path(),
        "10-main.toml",
        "[providers.s]\nkind = \"scripted\"\nscript = \"s.json\"\n\
         [agents.a]\nprovider = \"s\"\nmodel = \"m\"\n\
         [server]\nlisten = \"127.0.0.1:8787\"\n",
    );
    let breakers = write(
        dir.path(),
        "20-breakers.toml",
        "# breakers\n\n[breakers.provider]\nconsecutive_failures = 3\nbreak_duration = \"0s\"\n",
    );
    let out = rein_check(&[dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        places(&stderr),
        vec![format!("{breakers}:5:1: breakers.provider.break_duration")],
        "{stderr}"
    );
}
