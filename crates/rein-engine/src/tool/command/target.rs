//! [`CommandTarget`]: how to run one command tool, from the registry or
//! built by hand.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rein_core::registry::AdapterSpec;

use super::DEFAULT_MAX_OUTPUT_BYTES;

/// How to run one command tool.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandTarget {
    /// The tool's name: the target of its failures.
    pub name: String,
    /// The program: a bare name is looked up on `PATH` (the tool's own if
    /// its `env` sets one); a relative path is relative to `working_dir`.
    pub program: PathBuf,
    /// Its arguments (no shell).
    pub args: Vec<String>,
    /// The working directory; the adapter's own when `None`.
    pub working_dir: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Stdout and stderr bytes kept, each.
    pub max_output_bytes: usize,
}

impl std::fmt::Debug for CommandTarget {
    // By hand: credential-named variables are not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env = rein_core::redact::shown(&self.env);
        f.debug_struct("CommandTarget")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("working_dir", &self.working_dir)
            .field("env", &env)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish()
    }
}

impl CommandTarget {
    /// `program` as tool `name`, with no arguments and the defaults.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> CommandTarget {
        CommandTarget {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            working_dir: None,
            env: BTreeMap::new(),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// The target of registry tool `name` whose adapter is `spec`; `None`
    /// when `spec` is not a command adapter.
    pub fn from_spec(name: &str, spec: &AdapterSpec) -> Option<CommandTarget> {
        match spec {
            AdapterSpec::Command {
                program,
                args,
                working_dir,
                env,
                max_output_bytes,
                ..
            } => Some(CommandTarget {
                name: name.to_owned(),
                program: program.clone(),
                args: args.clone(),
                working_dir: working_dir.clone(),
                env: env.clone(),
                max_output_bytes: *max_output_bytes,
            }),
            _ => None,
        }
    }

    /// Sets the arguments.
    pub fn with_args<I, S>(mut self, args: I) -> CommandTarget
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the working directory.
    pub fn with_working_dir(mut self, dir: impl Into<PathBuf>) -> CommandTarget {
        self.working_dir = Some(dir.into());
        self
    }

    /// Adds an environment variable.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> CommandTarget {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Sets the bytes of stdout and of stderr kept (at least 1).
    pub fn with_max_output_bytes(mut self, max: usize) -> CommandTarget {
        self.max_output_bytes = max.max(1);
        self
    }
}
