//! [`SourceMaps`]: the spans of every file of a config, so that every
//! problem naming a field gets the line and column of that field.
//!
//! # Why one place for all problems
//!
//! Problems are found at many steps — deserializing an entry, `${ENV}`
//! interpolation, rein-core's integrity check, schema compilation, binding
//! providers and agents at start, `rein check`'s own refusals — and each
//! names a file and a dotted field path. Placing them all here, from the
//! file's spans ([`SourceMap::locate`]), gives every one its line without
//! each step having to know where its inputs were written.
//!
//! A problem keeps a position it already has (a syntax error's), and one
//! about a path that is not a config file (`--data`, a directory) or a
//! field the file does not hold stays without one.

use std::path::{Path, PathBuf};

use rein_core::registry::{ConfigProblem, Position, SourceMap};

/// The spans of each file of a loaded config.
#[derive(Debug, Clone, Default)]
pub struct SourceMaps {
    files: Vec<(PathBuf, SourceMap)>,
}

impl SourceMaps {
    /// Notes `map`, the spans of `file`.
    pub(crate) fn insert(&mut self, file: &Path, map: SourceMap) {
        self.files.push((file.to_path_buf(), map));
    }

    /// `problem`, placed at its field's line and column when it has no
    /// position yet and its file and field are known here.
    pub fn place(&self, problem: ConfigProblem) -> ConfigProblem {
        if problem.position.is_some() || problem.field.is_empty() {
            return problem;
        }
        let found = self
            .files
            .iter()
            .find(|(file, _)| *file == problem.file)
            .and_then(|(_, map)| map.locate(&problem.field));
        match found {
            Some(position) => problem.at(position),
            None => problem,
        }
    }

    /// The line and column of `field` in `file` (or of its deepest
    /// written parent, as [`place`](SourceMaps::place) finds it); `None`
    /// when `file` is not of this config or writes none of `field`.
    pub fn locate(&self, file: &Path, field: &str) -> Option<Position> {
        self.files
            .iter()
            .find(|(path, _)| path == file)
            .and_then(|(_, map)| map.locate(field))
    }

    /// The file that writes `field`, or the table it is in (the first
    /// file, in load order, holding its first key): where a problem found
    /// on the merged registry, which no longer says which file each
    /// setting came from, is filed. `None` when no file writes any of it.
    pub fn holding(&self, field: &str) -> Option<&Path> {
        self.files
            .iter()
            .find(|(_, map)| map.locate(field).is_some())
            .map(|(file, _)| file.as_path())
    }

    /// Each of `problems`, [placed](SourceMaps::place).
    pub fn place_all(&self, problems: Vec<ConfigProblem>) -> Vec<ConfigProblem> {
        problems.into_iter().map(|p| self.place(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use rein_core::registry::Position;

    use super::*;

    fn maps() -> SourceMaps {
        let mut maps = SourceMaps::default();
        let map = SourceMap::parse("[tools.a]\nclass = \"rea\"\n").unwrap();
        maps.insert(Path::new("a.toml"), map);
        maps
    }

    #[test]
    fn holding_names_the_file_that_writes_the_field_or_its_table() {
        let mut maps = maps();
        let server = SourceMap::parse("[server]\nlisten = \"127.0.0.1:1\"\n").unwrap();
        maps.insert(Path::new("b.toml"), server);
        assert_eq!(maps.holding("tools.a.class"), Some(Path::new("a.toml")));
        // Not written itself: the file of its table.
        assert_eq!(maps.holding("tools.a.latency"), Some(Path::new("a.toml")));
        assert_eq!(maps.holding("server.listen"), Some(Path::new("b.toml")));
        assert_eq!(maps.holding("breakers.tool"), None);
    }

    #[test]
    fn place_adds_the_line_of_the_field_in_its_own_file() {
        let placed = maps().place(ConfigProblem::new("a.toml", "tools.a.class", "bad"));
        assert_eq!(placed.position, Some(Position { line: 2, column: 1 }));
        assert_eq!(placed.to_string(), "a.toml:2:1: tools.a.class: bad");
    }

    #[test]
    fn place_keeps_a_position_and_leaves_unknown_files_and_fields_alone() {
        let maps = maps();
        let at = Position { line: 9, column: 9 };
        let kept = maps.place(ConfigProblem::new("a.toml", "tools.a.class", "x").at(at));
        assert_eq!(kept.position, Some(at));
        for (file, field) in [
            ("b.toml", "tools.a.class"),
            ("a.toml", "agents.b"),
            ("a.toml", ""),
        ] {
            let problem = maps.place(ConfigProblem::new(file, field, "x"));
            assert_eq!(problem.position, None, "{file} {field}");
        }
    }
}
