//! What the integrity check reports: [`ConfigProblem`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A line and column in a config file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Position {
    /// The line, from 1.
    pub line: u32,
    /// The column in characters, from 1.
    pub column: u32,
}

/// One refused setting: which file, which field, and what is wrong.
///
/// # Why a struct, not an error enum
///
/// An operator fixes a config file by going to a place in it. Every problem,
/// whatever its cause, therefore carries the same three things — the file,
/// the dotted field path (`tools.send_email.compensation.tool`) and a short
/// message — and, once the loader has placed it, a position. `Display` is
/// `FILE[:LINE:COLUMN]: FIELD: MESSAGE`, the shape compilers use, so editors
/// can jump to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ConfigProblem {
    /// The file the offending setting is in (or the path that could not be
    /// read).
    pub file: PathBuf,
    /// The dotted path of the setting; empty when the problem is the whole
    /// file (unreadable, or a syntax error).
    pub field: String,
    /// What is wrong and what was expected, lowercase, no trailing period.
    pub message: String,
    /// Where in the file, when known: the field's line and column, or its
    /// table's header when the field is missing (the loader places every
    /// problem whose field is written in its file; see
    /// [`SourceMap`](super::SourceMap)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

impl ConfigProblem {
    /// A problem with `field` of `file`.
    ///
    /// The message is redacted ([`crate::redact`]): a problem may quote a
    /// value, and an interpolated value may be a token.
    pub fn new(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigProblem {
        let message = message.into();
        ConfigProblem {
            file: file.into(),
            field: field.into(),
            message: crate::redact::text(&message).into_owned(),
            position: None,
        }
    }

    /// The same problem, located at `position`.
    pub fn at(mut self, position: Position) -> ConfigProblem {
        self.position = Some(position);
        self
    }

    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(Position { line, column }) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A problem a schema compiler found in one tool's JSON Schema.
///
/// `path` is dotted and relative to the schema (`properties.order_id.type`;
/// empty for the schema itself); the check prefixes it with
/// `tools.NAME.schema`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaIssue {
    /// Where in the schema, dotted.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl SchemaIssue {
    /// An issue at `path` inside the schema.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> SchemaIssue {
        SchemaIssue {
            path: path.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_file_field_message() {
        let p = ConfigProblem::new("conf/tools.toml", "tools.a.class", "is required");
        assert_eq!(p.to_string(), "conf/tools.toml: tools.a.class: is required");
    }

    #[test]
    fn display_with_position_and_no_field_is_compiler_style() {
        let p =
            ConfigProblem::new("rein.toml", "", "expected `]`").at(Position { line: 3, column: 7 });
        assert_eq!(p.to_string(), "rein.toml:3:7: expected `]`");
    }
}
