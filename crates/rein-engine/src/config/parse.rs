//! Reading config files: one file, or every `*.toml` in a directory, parsed
//! into [`ConfigSource`]s.
//!
//! Each entry (`[tools.NAME]`, …) is deserialized on its own, so one bad
//! entry is reported with its dotted field path and line while the other
//! entries are still checked; the bad entry is marked broken so references
//! to it do not cascade into "unknown tool" problems. Each file's spans are
//! kept ([`SourceMaps`]) so that every later problem gets its line too.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use rein_core::registry::{ConfigFile, ConfigProblem, ConfigSource, Position, SourceMap};
use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

use super::SourceMaps;

/// The sections a config file may hold.
const SECTIONS: [&str; 11] = [
    "providers",
    "models",
    "resource_groups",
    "tools",
    "agents",
    "breakers",
    "server",
    "telemetry",
    "store",
    "webhooks",
    "mcp_servers",
];

/// What reading a config path produced.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    /// Every file that parsed as TOML, in name order.
    pub(super) sources: Vec<ConfigSource>,
    /// Problems found while reading and deserializing.
    pub(super) problems: Vec<ConfigProblem>,
    /// The spans of every file that parsed as TOML.
    pub(super) maps: SourceMaps,
    /// Some file could not be read or is not valid TOML: its content is
    /// unknown, so cross-file checks would only report noise.
    pub(super) incomplete: bool,
}

/// Reads `path`: a file, or a directory whose `*.toml` files (not
/// recursively, in name order) together form one config.
pub(super) fn read(path: &Path) -> Parsed {
    let mut parsed = Parsed::default();
    let files = match files(path) {
        Ok(files) => files,
        Err(problem) => {
            parsed.problems.push(problem);
            parsed.incomplete = true;
            return parsed;
        }
    };
    for file in files {
        match fs::read_to_string(&file) {
            Ok(text) => parse_file(&file, &text, &mut parsed),
            Err(err) => {
                parsed.problems.push(ConfigProblem::new(
                    &file,
                    "",
                    format!("cannot be read: {err}"),
                ));
                parsed.incomplete = true;
            }
        }
    }
    parsed
}

/// The files `path` stands for.
fn files(path: &Path) -> Result<Vec<PathBuf>, ConfigProblem> {
    let meta = fs::metadata(path)
        .map_err(|err| ConfigProblem::new(path, "", format!("cannot be read: {err}")))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = fs::read_dir(path)
        .map_err(|err| ConfigProblem::new(path, "", format!("cannot be listed: {err}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|err| ConfigProblem::new(path, "", format!("cannot be listed: {err}")))?;
        let file = entry.path();
        if file.extension().is_some_and(|ext| ext == "toml") && file.is_file() {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(ConfigProblem::new(
            path,
            "",
            "holds no *.toml files; a config directory needs at least one",
        ));
    }
    files.sort();
    Ok(files)
}

/// Parses one file's `text` into `parsed`.
pub(super) fn parse_file(file: &Path, text: &str, parsed: &mut Parsed) {
    let top: toml::Table = match toml::from_str(text) {
        Ok(top) => top,
        Err(err) => {
            let mut problem = ConfigProblem::new(file, "", err.message().to_owned());
            if let Some(span) = err.span() {
                problem = problem.at(Position::at_offset(text, span.start));
            }
            parsed.problems.push(problem);
            parsed.incomplete = true;
            return;
        }
    };
    // The same text parsed by `toml` just now: it parses again.
    let map = SourceMap::parse(text).ok();
    let mut shaped = true;
    for (key, value) in &top {
        if !SECTIONS.contains(&key.as_str()) {
            parsed.problems.push(ConfigProblem::new(
                file,
                key.clone(),
                "is not a section; expected providers, models, resource_groups, tools, agents, breakers, server, telemetry, store, webhooks or mcp_servers",
            ));
            // The entry reading below needs every top-level value a table.
            shaped &= value.is_table();
        } else if !value.is_table() {
            parsed
                .problems
                .push(ConfigProblem::new(file, key.clone(), "must be a table"));
            shaped = false;
        }
    }
    if let Some(map) = &map {
        parsed.maps.insert(file, map.clone());
    }
    if !shaped {
        parsed.incomplete = true;
        return;
    }
    // Every top-level value is a table now: section → name → entry, each
    // placed by the source map (a table made implicitly by a deeper header,
    // `[server.quotas.tenants.acme]` with no `[server.quotas]`, has no span
    // of its own in `toml`'s `Spanned`, which refused the whole file).
    let mut config = ConfigFile::default();
    let mut source_broken = Vec::new();
    let mut reader = EntryReader {
        file,
        text,
        map: map.as_ref(),
        problems: &mut parsed.problems,
        broken: &mut source_broken,
    };
    for (section, value) in top {
        let toml::Value::Table(entries) = value else {
            continue;
        };
        match section.as_str() {
            "providers" => reader.section(&section, entries, &mut config.providers),
            "models" => reader.section(&section, entries, &mut config.models),
            "resource_groups" => reader.section(&section, entries, &mut config.resource_groups),
            "tools" => reader.section(&section, entries, &mut config.tools),
            "agents" => reader.section(&section, entries, &mut config.agents),
            "webhooks" => reader.section(&section, entries, &mut config.webhooks),
            "mcp_servers" => reader.section(&section, entries, &mut config.mcp_servers),
            "breakers" => {
                config.breakers = reader.entry("breakers", toml::Value::Table(entries));
            }
            "server" => config.server = reader.entry("server", toml::Value::Table(entries)),
            "telemetry" => {
                config.telemetry = reader.entry("telemetry", toml::Value::Table(entries));
            }
            "store" => config.store = reader.entry("store", toml::Value::Table(entries)),
            _ => {}
        }
    }
    let mut source = ConfigSource::new(file, config);
    for entry in source_broken {
        source = source.with_broken(entry);
    }
    parsed.sources.push(source);
}

/// Deserializes entries one by one, reporting each failure.
struct EntryReader<'a> {
    file: &'a Path,
    text: &'a str,
    map: Option<&'a SourceMap>,
    problems: &'a mut Vec<ConfigProblem>,
    broken: &'a mut Vec<String>,
}

impl EntryReader<'_> {
    fn section<T: DeserializeOwned>(
        &mut self,
        section: &str,
        entries: toml::Table,
        into: &mut BTreeMap<String, T>,
    ) {
        for (name, value) in entries {
            let entry = format!("{section}.{name}");
            if let Some(config) = self.entry(&entry, value) {
                into.insert(name, config);
            }
        }
    }

    /// Deserializes `value`, the entry `entry`; each failure is placed at
    /// its field, else at the entry (else at the file's start).
    ///
    /// A failure at a field is reported, the field taken out, and the entry
    /// read again, so that every bad field of the entry is reported in one
    /// pass. An entry that reads once its bad fields are out is kept (the
    /// config is refused anyway, for the problems reported) so that the
    /// check reports the rest of it too: a misspelt `descripton` then also
    /// shows the missing `description`. An entry that still does not read
    /// is marked broken.
    fn entry<T: DeserializeOwned>(&mut self, entry: &str, mut value: toml::Value) -> Option<T> {
        /// More bad fields than this in one entry are reported a pass later.
        const MAX_PASSES: usize = 32;
        for _ in 0..MAX_PASSES {
            let err = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Ok(config) => return Some(config),
                Err(err) => err,
            };
            let path = err.path().to_string();
            let field = if path == "." || path.is_empty() {
                entry.to_owned()
            } else {
                format!("{entry}.{path}")
            };
            let position = self
                .map
                .and_then(|map| map.locate(&field).or_else(|| map.locate(entry)))
                .unwrap_or_else(|| Position::at_offset(self.text, 0));
            self.problems.push(
                ConfigProblem::new(self.file, field, err.inner().message().to_owned()).at(position),
            );
            let segments: Vec<Segment> = err.path().iter().cloned().collect();
            if segments.is_empty() || !remove(&mut value, &segments) {
                break;
            }
        }
        self.broken.push(entry.to_owned());
        None
    }
}

/// Takes the value at `path` out of `value`; whether it was there.
fn remove(value: &mut toml::Value, path: &[Segment]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match (segment, at) {
            (Segment::Map { key }, toml::Value::Table(table)) => table.get_mut(key),
            (Segment::Seq { index }, toml::Value::Array(items)) => items.get_mut(*index),
            _ => None,
        };
        match next {
            Some(next) => at = next,
            None => return false,
        }
    }
    // An array item is not taken out: the items after it would move up and
    // a later problem among them would be reported at the wrong index.
    match (last, at) {
        (Segment::Map { key }, toml::Value::Table(table)) => table.remove(key).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Parsed {
        let mut parsed = Parsed::default();
        parse_file(Path::new("rein.toml"), text, &mut parsed);
        parsed
    }

    #[test]
    fn syntax_error_reports_line_and_column() {
        let parsed = parse("[tools.a]\nclass = \"read\"\nschema = {\n");
        assert!(parsed.incomplete);
        assert_eq!(parsed.problems.len(), 1);
        let p = &parsed.problems[0];
        assert_eq!(p.field, "");
        assert_eq!(p.position.map(|p| p.line), Some(3));
        assert!(p.to_string().starts_with("rein.toml:3:"), "{p}");
    }

    /// A table made only by a deeper header (`[server.quotas]` never
    /// written, `[tools.t]` only through `[tools.t.latency]`) reads like one
    /// written out, and a bad field under it is placed at its line.
    #[test]
    fn tables_made_implicitly_by_deeper_headers_read() {
        let text = "\
[server.quotas.tenants.acme]
max_running = 2
[tools.t.latency]
p50 = \"10ms\"
[tools.u.compensation]
grade = \"total\"
";
        let parsed = parse(text);
        assert!(!parsed.incomplete);
        let fields: Vec<_> = parsed.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["tools.u.compensation.grade"],
            "{:?}",
            parsed.problems
        );
        assert_eq!(parsed.problems[0].position.map(|p| p.line), Some(6));
        let config = &parsed.sources[0].config;
        assert_eq!(
            config
                .server
                .as_ref()
                .and_then(|s| s.quotas.tenants["acme"].max_running),
            Some(2)
        );
        assert!(config.tools.contains_key("t"));
    }

    #[test]
    fn each_bad_field_is_reported_at_its_path_and_the_rest_of_its_entry_kept() {
        let text = "\
[tools.a]
clas = \"read\"

[tools.b]
class = \"read\"
[tools.b.compensation]
grade = \"total\"

[tools.c]
class = \"read\"
";
        let parsed = parse(text);
        assert!(!parsed.incomplete);
        let fields: Vec<_> = parsed.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, vec!["tools.a.clas", "tools.b.compensation.grade"]);
        assert!(
            parsed.problems[0]
                .message
                .starts_with("unknown field `clas`"),
            "{}",
            parsed.problems[0].message
        );
        // At the misspelt key, and at the bad value under the sub-table.
        assert_eq!(parsed.problems[0].position.map(|p| p.line), Some(2));
        assert_eq!(parsed.problems[1].position.map(|p| p.line), Some(7));
        // Read without their bad fields, so the check reports the rest of
        // them (tools.a's missing class) in the same pass.
        let source = &parsed.sources[0];
        assert_eq!(
            source.config.tools.keys().collect::<Vec<_>>(),
            vec!["a", "b", "c"]
        );
        assert!(source.config.tools["a"].class.is_none());
        assert!(source.broken.is_empty());
        // Every bad field of one entry at once, not one per `rein check`.
        let parsed = parse(
            "[tools.a]
clas = \"read\"
owner = 7
[tools.a.latency]
p99 = \"soon\"
",
        );
        let fields: Vec<_> = parsed.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields.len(), 3, "{fields:?}");
        // A value that is not a table cannot be read without itself.
        let parsed = parse(
            "[tools]
a = 1
",
        );
        assert!(parsed.sources[0].broken.contains("tools.a"));
    }

    #[test]
    fn unknown_sections_and_non_table_sections_are_refused() {
        let parsed = parse("tool = 1\n[toolz.a]\n");
        let fields: Vec<_> = parsed.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, vec!["tool", "toolz"]);
        let parsed = parse("tools = 1\n");
        assert!(parsed.incomplete);
        assert_eq!(parsed.problems[0].message, "must be a table");
    }

    #[test]
    fn breakers_section_is_read_and_checked() {
        let parsed = parse("[breakers.tool]\nbreak_duration = \"1m\"\n");
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert!(parsed.sources[0].config.breakers.is_some());
        let parsed = parse("[breakers.tool]\nbreak_durations = \"1m\"\n");
        assert_eq!(parsed.problems[0].field, "breakers.tool.break_durations");
    }

    #[test]
    fn server_section_is_read_and_its_type_errors_name_the_field() {
        let text = "[server]\nlisten = \"0.0.0.0:80\"\n[[server.api_keys]]\ntenant = \"acme\"\n";
        let parsed = parse(text);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let server = parsed.sources[0].config.server.as_ref().unwrap();
        assert_eq!(server.listen.as_deref(), Some("0.0.0.0:80"));
        assert_eq!(server.api_keys.len(), 1);

        let parsed = parse("[server.queue]\nlease = \"soon\"\n");
        assert_eq!(parsed.problems[0].field, "server.queue.lease");
        // Read without it, the rest of [server] is checked too.
        assert!(parsed.sources[0].config.server.is_some());
        let parsed =
            parse("[[server.api_keys]]\ntenant = \"a\"\n[[server.api_keys]]\nsha = \"x\"\n");
        assert_eq!(parsed.problems[0].field, "server.api_keys[1].sha");
    }
}
