//! [`ConfigErrors`]: every problem of a config that failed to load.

use std::fmt;

use rein_core::registry::ConfigProblem;

/// A config that failed to load, with every problem found — not just the
/// first — so an operator fixes them all in one round.
///
/// `Display` lists the problems one per line, each as
/// `FILE[:LINE:COLUMN]: FIELD: MESSAGE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    problems: Vec<ConfigProblem>,
    warnings: Vec<ConfigProblem>,
}

impl ConfigErrors {
    /// Errors holding `problems`.
    pub fn new(problems: Vec<ConfigProblem>) -> ConfigErrors {
        ConfigErrors {
            problems,
            warnings: Vec::new(),
        }
    }

    /// The same errors, with `warnings` found on the way (a secret too
    /// short to be redacted): `rein check` shows both.
    pub fn with_warnings(mut self, warnings: Vec<ConfigProblem>) -> ConfigErrors {
        self.warnings.extend(warnings);
        self
    }

    /// What the start would say but not refuse; not part of `Display`.
    pub fn warnings(&self) -> &[ConfigProblem] {
        &self.warnings
    }

    /// The problems, grouped by file.
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }

    /// The problems, owned.
    pub fn into_problems(self) -> Vec<ConfigProblem> {
        self.problems
    }

    /// How many problems there are.
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// Whether there are none (never, for a returned error).
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl From<Vec<ConfigProblem>> for ConfigErrors {
    fn from(problems: Vec<ConfigProblem>) -> Self {
        ConfigErrors::new(problems)
    }
}

impl IntoIterator for ConfigErrors {
    type Item = ConfigProblem;
    type IntoIter = std::vec::IntoIter<ConfigProblem>;

    fn into_iter(self) -> Self::IntoIter {
        self.problems.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_one_problem_per_line() {
        let errors = ConfigErrors::new(vec![
            ConfigProblem::new("a.toml", "tools.x.class", "is required"),
            ConfigProblem::new("b.toml", "agents.y.provider", "names `z`"),
        ]);
        assert_eq!(
            errors.to_string(),
            "a.toml: tools.x.class: is required\nb.toml: agents.y.provider: names `z`"
        );
        assert_eq!(errors.len(), 2);
    }
}
