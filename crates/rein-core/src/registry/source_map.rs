//! Where a setting is written: [`SourceMap`] turns the dotted field path a
//! [`ConfigProblem`](super::ConfigProblem) names
//! (`tools.orders.latency.p99_ms`, `server.api_keys[1].sha256`) into the
//! line and column of that setting in its file's text.
//!
//! # Why after the fact
//!
//! The checks that refuse a setting run on deserialized config types, which
//! no longer know where their values were written; carrying a span in every
//! field of every config type would change all of them. Every problem
//! already names its field path, so one walk over the file's spanned
//! document (a [`toml_edit::ImDocument`], which keeps the span of every
//! key, header and value) places it, whichever check found it.
//!
//! # How a path is walked
//!
//! The path is split into keys at `.` and into indexes at `[i]`; a numeric
//! key (`adapter.args.2`) indexes an array as `[2]` does. At each table the
//! walk follows the key, or — for a key that holds a dot itself, as
//! `[tools.x.prices."gpt-4.1"]` does — the longest match of several
//! segments joined by `.`. The walk goes through `[header]` tables, dotted
//! keys, inline tables, arrays and arrays of tables (`[[…]]`) alike.
//!
//! Each step lands on a place:
//!
//! | the step reaches | its place |
//! |---|---|
//! | a table with a header (`[tools.a]`, one `[[server.api_keys]]`) | the header |
//! | any other keyed item (a value, an inline table, a dotted-key table) | its key |
//! | an array element | the element |
//!
//! A path that leaves the document part-way (a required field that is
//! missing, an entry whose table has no such key) is placed at the
//! deepest step that exists: a missing field of `[tools.a]` points at the
//! `[tools.a]` header. A path whose first key is not in the document has no
//! place at all (`None`): the problem is about something this file does not
//! hold.

use std::ops::Range;
use std::sync::Arc;

use toml_edit::{ImDocument, Item, Key, Table, Value};

use super::Position;

/// The spans of one config file's text, for locating field paths in it.
///
/// Cheap to clone (shared): the loader reads entries with it while the
/// loaded config keeps it for the problems found at start.
#[derive(Debug, Clone)]
pub struct SourceMap {
    doc: Arc<ImDocument<String>>,
}

/// One step of a field path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment<'p> {
    /// A key (`tools`, `p99_ms`); may be numeric (`args.2`).
    Key(&'p str),
    /// An index (`[1]`).
    Index(usize),
}

impl SourceMap {
    /// The spans of `text`, a TOML document.
    ///
    /// # Errors
    ///
    /// The text is not valid TOML (the loader reports that as a syntax
    /// error with its own position; a file that does not parse has no map).
    pub fn parse(text: impl Into<String>) -> Result<SourceMap, toml_edit::TomlError> {
        ImDocument::parse(text.into()).map(|doc| SourceMap { doc: Arc::new(doc) })
    }

    /// The line and column where the setting `path` is written, or where
    /// its deepest existing parent is; `None` when not even the first key
    /// of `path` is in the document. See the module docs for the rules.
    pub fn locate(&self, path: &str) -> Option<Position> {
        let segments = segments(path);
        let (_, offset) = walk(Node::Item(self.doc.as_item()), &segments)?;
        Some(Position::at_offset(self.doc.raw(), offset))
    }
}

impl Position {
    /// The line and column (from 1, the column in characters) of byte
    /// `offset` of `text`; an offset past the end, or inside a character,
    /// is the end.
    pub fn at_offset(text: &str, offset: usize) -> Position {
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Position {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }
}

/// `path` split at `.` and `[i]`; empty keys (`a..b`, a leading `.`) are
/// dropped, and a bracket that does not hold a number is kept as a key.
fn segments(path: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        // `api_keys[1][0]`: the key, then each index.
        let key_end = rest.find('[').unwrap_or(rest.len());
        if key_end > 0 {
            out.push(Segment::Key(&rest[..key_end]));
        }
        rest = &rest[key_end..];
        while let Some(inner) = rest.strip_prefix('[') {
            let Some(close) = inner.find(']') else {
                out.push(Segment::Key(rest));
                break;
            };
            match inner[..close].parse() {
                Ok(index) => out.push(Segment::Index(index)),
                Err(_) => out.push(Segment::Key(&rest[..close + 2])),
            }
            rest = &inner[close + 1..];
        }
        if !rest.is_empty() && !rest.starts_with('[') {
            out.push(Segment::Key(rest));
        }
    }
    out
}

/// A place in the document the walk can stand on: an [`Item`], or the
/// table of an array of tables, or the value of an inline array, which
/// `toml_edit` does not hold as items.
#[derive(Clone, Copy)]
enum Node<'i> {
    Item(&'i Item),
    Table(&'i Table),
    Value(&'i Value),
}

/// Walks `segments` from `node`: how many segments were matched and the
/// byte offset of the place of the last one matched; `None` when the first
/// does not match.
fn walk(node: Node<'_>, segments: &[Segment<'_>]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (used, child, offset) in steps(node, segments) {
        let here = match walk(child, &segments[used..]) {
            Some((deeper, offset)) => (used + deeper, offset),
            None => (used, offset),
        };
        // The deepest match wins; on a tie, the shorter key (found first).
        if best.is_none_or(|(n, _)| here.0 > n) {
            best = Some(here);
        }
    }
    best
}

/// Every way the first segment(s) of `segments` lead from `node` to a
/// child: (segments used, the child, the byte offset of its place).
fn steps<'i>(node: Node<'i>, segments: &[Segment<'_>]) -> Vec<(usize, Node<'i>, usize)> {
    let Some(first) = segments.first() else {
        return Vec::new();
    };
    let index = match *first {
        Segment::Index(i) => Some(i),
        Segment::Key(key) => key.parse().ok(),
    };
    match node {
        Node::Item(Item::Table(table)) | Node::Table(table) => {
            keyed(segments, |key| table.get_key_value(key))
        }
        Node::Item(Item::Value(Value::InlineTable(table)))
        | Node::Value(Value::InlineTable(table)) => keyed(segments, |key| table.get_key_value(key)),
        Node::Item(Item::ArrayOfTables(tables)) => index
            .and_then(|i| tables.get(i))
            .and_then(|table| Some((1, Node::Table(table), start(table.span())?)))
            .into_iter()
            .collect(),
        Node::Item(Item::Value(Value::Array(array))) | Node::Value(Value::Array(array)) => index
            .and_then(|i| array.get(i))
            .and_then(|value| Some((1, Node::Value(value), start(value.span())?)))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// The keyed steps from a table whose entries `get` finds: the first
/// segment as a key, then — for keys holding a dot — the first two joined
/// by `.`, and so on while the segments are keys.
fn keyed<'i>(
    segments: &[Segment<'_>],
    get: impl Fn(&str) -> Option<(&'i Key, &'i Item)>,
) -> Vec<(usize, Node<'i>, usize)> {
    let mut found = Vec::new();
    let mut joined = String::new();
    for (n, segment) in segments.iter().enumerate() {
        let Segment::Key(key) = segment else { break };
        if n > 0 {
            joined.push('.');
        }
        joined.push_str(key);
        if let Some((key, child)) = get(&joined)
            && let Some(offset) = place(key, child)
        {
            found.push((n + 1, Node::Item(child), offset));
        }
    }
    found
}

/// The place of `child`, reached by `key`: a table's header when it has
/// one, else the key.
fn place(key: &Key, child: &Item) -> Option<usize> {
    let header = match child {
        Item::Table(table) if !table.is_implicit() && !table.is_dotted() => start(table.span()),
        _ => None,
    };
    header.or_else(|| start(key.span()))
}

fn start(span: Option<Range<usize>>) -> Option<usize> {
    span.map(|span| span.start)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Every shape a setting can be written in, each on a known line.
    const DOC: &str = r#"[resource_groups.orders]
max_concurrency = 4

[tools.orders]
class = "write"
latency = { mode = "enforce", p99_ms = 0 }
adapter.kind = "http"
adapter.args = ["a", "b", "c"]
prices."gpt-4.1" = 3

[tools.orders.compensation]
tool = "cancel"

[[server.api_keys]]
tenant = "acme"

[[server.api_keys]]
tenant = "globex"
sha256 = "00"
"#;

    fn at(line: u32, column: u32) -> Option<Position> {
        Some(Position { line, column })
    }

    #[test]
    fn locate_finds_each_shape_of_setting_at_its_line() {
        let map = SourceMap::parse(DOC).unwrap();
        let cases = [
            // A table with a header is placed at the header.
            ("resource_groups.orders", at(1, 1)),
            ("resource_groups.orders.max_concurrency", at(2, 1)),
            ("tools.orders", at(4, 1)),
            ("tools.orders.class", at(5, 1)),
            // A key of an inline table.
            ("tools.orders.latency", at(6, 1)),
            ("tools.orders.latency.p99_ms", at(6, 31)),
            // Dotted keys, and an array element by index either way.
            ("tools.orders.adapter", at(7, 1)),
            ("tools.orders.adapter.kind", at(7, 9)),
            ("tools.orders.adapter.args[2]", at(8, 27)),
            ("tools.orders.adapter.args.1", at(8, 22)),
            // A key holding a dot.
            ("tools.orders.prices.gpt-4.1", at(9, 8)),
            // A sub-table's header.
            ("tools.orders.compensation", at(11, 1)),
            ("tools.orders.compensation.tool", at(12, 1)),
            // Arrays of tables: each element at its own header.
            ("server.api_keys[0]", at(14, 1)),
            ("server.api_keys[0].tenant", at(15, 1)),
            ("server.api_keys[1].tenant", at(18, 1)),
            ("server.api_keys[1].sha256", at(19, 1)),
        ];
        for (path, want) in cases {
            assert_eq!(map.locate(path), want, "{path}");
        }
    }

    #[test]
    fn locate_falls_back_to_the_deepest_existing_parent() {
        let map = SourceMap::parse(DOC).unwrap();
        let cases = [
            // A missing field of a table: the table's header.
            ("tools.orders.owner", at(4, 1)),
            ("tools.orders.compensation.grade", at(11, 1)),
            // Of an inline table: its key.
            ("tools.orders.latency.fallback_p99", at(6, 1)),
            // Past an array's end, or a field of a missing element.
            ("tools.orders.adapter.args[7]", at(8, 9)),
            ("server.api_keys[0].sha256", at(14, 1)),
            ("server.api_keys[5].tenant", at(14, 10)),
            // Deeper than a value goes.
            ("tools.orders.class.name", at(5, 1)),
            // Nothing of the path is in the document.
            ("agents.support.model", None),
            ("", None),
        ];
        for (path, want) in cases {
            assert_eq!(map.locate(path), want, "{path}");
        }
    }

    #[test]
    fn locate_places_an_implicit_table_at_its_first_mention() {
        let map = SourceMap::parse("\n[tools.a.latency]\nmode = \"observe\"\n").unwrap();
        // `[tools.a]` is never written: `tools.a.class` is missing from a
        // table that exists only through `[tools.a.latency]`.
        assert_eq!(map.locate("tools.a.class"), at(2, 8));
        assert_eq!(map.locate("tools.a.latency.mode"), at(3, 1));
    }

    #[test]
    fn position_counts_lines_and_characters_from_one() {
        let text = "a\nbé = 1\n";
        assert_eq!(
            Position::at_offset(text, 0),
            Position { line: 1, column: 1 }
        );
        assert_eq!(
            Position::at_offset(text, 2),
            Position { line: 2, column: 1 }
        );
        assert_eq!(
            Position::at_offset(text, 5),
            Position { line: 2, column: 3 }
        );
        assert_eq!(
            Position::at_offset(text, 99),
            Position { line: 3, column: 1 }
        );
    }

    /// How a generated setting is written.
    #[derive(Debug, Clone, Copy)]
    enum Style {
        /// `[s.t]` then `k = 1`.
        Header,
        /// `[s]` then `t.k = 1`.
        Dotted,
        /// `[s]` then `t = { …, k = 1 }`.
        Inline,
        /// `[[s.t]]` then `k = 1`, the path indexing the element.
        ArrayOfTables,
    }

    fn style() -> impl Strategy<Value = Style> {
        prop_oneof![
            Just(Style::Header),
            Just(Style::Dotted),
            Just(Style::Inline),
            Just(Style::ArrayOfTables),
        ]
    }

    proptest! {
        /// Whatever the shape and the blank lines around it, every key
        /// written is located at the line and column it was written at.
        #[test]
        fn locate_finds_every_generated_key_where_it_was_written(
            entries in proptest::collection::vec((style(), 1usize..4, 0usize..3), 1..6)
        ) {
            let mut text = String::new();
            let mut line = 1u32;
            let mut expected = Vec::new();
            for (n, (style, keys, blank)) in entries.iter().enumerate() {
                for _ in 0..*blank {
                    text.push('\n');
                    line += 1;
                }
                let section = format!("s{n}");
                match style {
                    Style::Header | Style::ArrayOfTables => {
                        let (open, close, at) = match style {
                            Style::Header => ("[", "]", String::new()),
                            _ => ("[[", "]]", "[0]".to_owned()),
                        };
                        text.push_str(&format!("{open}{section}.t{close}\n"));
                        expected.push((format!("{section}.t{at}"), line, 1));
                        line += 1;
                        for k in 0..*keys {
                            text.push_str(&format!("k{k} = {k}\n"));
                            expected.push((format!("{section}.t{at}.k{k}"), line, 1));
                            line += 1;
                        }
                    }
                    Style::Dotted => {
                        text.push_str(&format!("[{section}]\n"));
                        line += 1;
                        for k in 0..*keys {
                            text.push_str(&format!("t.k{k} = {k}\n"));
                            expected.push((format!("{section}.t.k{k}"), line, 3));
                            line += 1;
                        }
                    }
                    Style::Inline => {
                        text.push_str(&format!("[{section}]\nt = {{ "));
                        line += 1;
                        let mut column = 7;
                        for k in 0..*keys {
                            if k > 0 {
                                text.push_str(", ");
                                column += 2;
                            }
                            let item = format!("k{k} = {k}");
                            text.push_str(&item);
                            expected.push((format!("{section}.t.k{k}"), line, column));
                            column += u32::try_from(item.len()).unwrap();
                        }
                        text.push_str(" }\n");
                        line += 1;
                    }
                }
            }
            let map = SourceMap::parse(text.clone()).unwrap();
            for (path, line, column) in expected {
                prop_assert_eq!(map.locate(&path), at(line, column), "{}\n{}", path, text);
            }
        }
    }
}
