//! `rein init`: a working config for a new agent, and a tool service to
//! grow it from.
//!
//! # Why
//!
//! A newcomer's first own agent used to start from a copy of the order
//! desk's 200-line example, with its demo-only parts (a scripted provider,
//! an email nobody should send) to find and remove. `init` writes the
//! smallest config that still shows what rein is for: a model with a
//! fallback, one read and one write with its compensation, and a budget,
//! each with a comment saying what rein does with it. It runs as written
//! against `rein dev`, and `tool_service.py` beside it is the HTTP tool
//! contract in a file a reader can run and change.
//!
//! Asked interactively at a terminal (defaults in brackets), by flags in a
//! script; it never overwrites a file unless `--force` says so.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

/// The config template; `{{name}}` placeholders are filled by [`render`].
const CONFIG_TEMPLATE: &str = include_str!("rein.toml.in");
/// The tool service, written as it is.
const TOOL_SERVICE: &str = include_str!("tool_service.py");
/// The name of the config `init` writes.
const CONFIG_FILE: &str = "rein.toml";
/// The name of the tool service `init` writes.
const TOOL_SERVICE_FILE: &str = "tool_service.py";

/// Where the agent's model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// `rein dev`'s mock model (OpenAI's format, at `${MOCK_MODEL_URL}`):
    /// no key, no cost; runs as written.
    Mock,
    /// OpenAI's API (`OPENAI_API_KEY`).
    Openai,
    /// Anthropic's API (`ANTHROPIC_API_KEY`).
    Anthropic,
}

impl Provider {
    const ALL: [Provider; 3] = [Provider::Mock, Provider::Openai, Provider::Anthropic];

    /// The name it has in config and on the command line.
    fn name(self) -> &'static str {
        match self {
            Provider::Mock => "mock",
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    fn parse(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The primary model and its fallback: models rein knows the output
    /// caps of, so `rein check` needs nothing more.
    fn models(self) -> (&'static str, &'static str) {
        match self {
            Provider::Mock | Provider::Openai => ("gpt-4o-mini", "gpt-4.1-mini"),
            Provider::Anthropic => ("claude-sonnet-4-5", "claude-haiku-4-5"),
        }
    }

    /// The `[providers.NAME]` section, with prices for both models so the
    /// budget's `max_cost_usd` is enforced.
    fn section(self) -> String {
        let (primary, fallback) = self.models();
        let (head, prices) = match self {
            Provider::Mock => (
                "# The model: any OpenAI-compatible server at ${MOCK_MODEL_URL}, such as\n\
                 # `rein dev`'s mock model. For OpenAI itself, `rein init --provider openai`.\n\
                 [providers.mock]\n\
                 kind = \"openai\"\n\
                 base_url = \"${MOCK_MODEL_URL}/v1\"\n\
                 timeout = \"30s\"",
                [(0.15, 0.60), (0.40, 1.60)],
            ),
            Provider::Openai => (
                "# The model: OpenAI's API, with the key read from OPENAI_API_KEY (never\n\
                 # written here, never logged).\n\
                 [providers.openai]\n\
                 kind = \"openai\"\n\
                 base_url = \"https://api.openai.com/v1\"\n\
                 api_key_env = \"OPENAI_API_KEY\"\n\
                 timeout = \"60s\"",
                [(0.15, 0.60), (0.40, 1.60)],
            ),
            Provider::Anthropic => (
                "# The model: Anthropic's API, with the key read from ANTHROPIC_API_KEY\n\
                 # (never written here, never logged).\n\
                 [providers.anthropic]\n\
                 kind = \"anthropic\"\n\
                 base_url = \"https://api.anthropic.com/v1\"\n\
                 api_key_env = \"ANTHROPIC_API_KEY\"\n\
                 timeout = \"60s\"",
                [(3.0, 15.0), (1.0, 5.0)],
            ),
        };
        let mut section = format!(
            "{head}\n# USD per million tokens: check them against your provider's price list.\n"
        );
        for (model, (input, output)) in [primary, fallback].into_iter().zip(prices) {
            section.push_str(&format!(
                "[providers.{}.prices.\"{model}\"]\ninput_per_mtok_usd = {input:.2}\noutput_per_mtok_usd = {output:.2}\n",
                self.name()
            ));
        }
        section
    }
}

/// Arguments of `rein init`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein init                                  # asks at a terminal; writes ./rein.toml and ./tool_service.py
  rein init my-agent --agent support --yes   # no questions: the defaults and these flags
  rein init --provider anthropic --yes       # Claude, with a fallback to a smaller Claude

Then, with `rein dev` running in another terminal:
  export MOCK_MODEL_URL=http://127.0.0.1:8081 TOOLS_URL=http://127.0.0.1:8080
  rein check rein.toml
  rein run --config rein.toml --agent assistant --input \"Move order A-1001 to 2026-01-08T14:00:00Z\"")]
pub struct InitArgs {
    /// The directory to write into (created if missing).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// The agent's name: letters, digits, `_` and `-`, starting with a letter.
    #[arg(long)]
    agent: Option<String>,
    /// Where the agent's model comes from.
    #[arg(long, value_enum)]
    provider: Option<Provider>,
    /// Ask nothing, even at a terminal: the flags and the defaults
    /// (agent `assistant`, provider `mock`).
    #[arg(long, short)]
    yes: bool,
    /// Overwrite rein.toml and tool_service.py when they exist.
    #[arg(long)]
    force: bool,
    /// Print one JSON document (files written, agent, next commands).
    #[arg(long)]
    json: bool,
}

/// What `init` decided, asked or given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Choices {
    agent: String,
    provider: Provider,
}

/// Runs `rein init`. Exit status: 0 when both files were written, 2 when
/// nothing was (a file exists, a name is invalid, the directory cannot be
/// written); no file is half written.
pub fn run(args: InitArgs) -> Result<ExitCode> {
    let given = (args.agent.clone(), args.provider);
    let choices = if !args.yes && !args.json && std::io::stdin().is_terminal() {
        let stdin = std::io::stdin();
        ask(&mut stdin.lock(), &mut std::io::stderr(), given)?
    } else {
        Choices {
            agent: given.0.unwrap_or_else(|| "assistant".to_owned()),
            provider: given.1.unwrap_or(Provider::Mock),
        }
    };
    check_agent_name(&choices.agent)?;
    let config = args.dir.join(CONFIG_FILE);
    let service = args.dir.join(TOOL_SERVICE_FILE);
    if !args.force {
        for path in [&config, &service] {
            if path.exists() {
                bail!(
                    "{} exists; pass --force to overwrite it, or name another directory",
                    path.display()
                );
            }
        }
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    write_file(&config, &render(&choices, &config))?;
    write_file(&service, TOOL_SERVICE)?;
    let next = next_commands(&choices, &config);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "files": [config.display().to_string(), service.display().to_string()],
                "agent": choices.agent,
                "provider": choices.provider.name(),
                "next": next,
            })
        );
    } else {
        let (primary, fallback) = choices.provider.models();
        println!(
            "wrote {} (agent `{}` on {primary} with a fallback to {fallback}, \
             a read tool, a write tool and its compensation, a budget)",
            config.display(),
            choices.agent
        );
        println!(
            "wrote {} (the tools' HTTP contract, runnable: python3 {TOOL_SERVICE_FILE})\n",
            service.display()
        );
        println!("next, with `rein dev` running in another terminal:");
        for command in &next {
            println!("  {command}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks for what the flags did not give, each with its default in
/// brackets; an empty answer takes the default, a wrong one asks again.
fn ask(
    input: &mut impl BufRead,
    prompt: &mut impl Write,
    (agent, provider): (Option<String>, Option<Provider>),
) -> Result<Choices> {
    let agent = match agent {
        Some(agent) => agent,
        None => loop {
            let answer = question(input, prompt, "Agent name", "assistant")?;
            match check_agent_name(&answer) {
                Ok(()) => break answer,
                Err(err) => writeln!(prompt, "{err}")?,
            }
        },
    };
    let provider = match provider {
        Some(provider) => provider,
        None => loop {
            let names = Provider::ALL.map(Provider::name).join(", ");
            let answer = question(input, prompt, &format!("Model provider ({names})"), "mock")?;
            match Provider::parse(&answer) {
                Some(provider) => break provider,
                None => writeln!(prompt, "{answer:?} is none of {names}")?,
            }
        },
    };
    Ok(Choices { agent, provider })
}

/// One question; the default when the answer is empty. The end of the
/// input is an error rather than an endless loop of defaults.
fn question(
    input: &mut impl BufRead,
    prompt: &mut impl Write,
    what: &str,
    default: &str,
) -> Result<String> {
    write!(prompt, "{what} [{default}]: ")?;
    prompt.flush()?;
    let mut line = String::new();
    if input.read_line(&mut line)? == 0 {
        bail!("the input ended before `{what}` was answered (use --yes to take the defaults)");
    }
    let answer = line.trim();
    Ok(if answer.is_empty() { default } else { answer }.to_owned())
}

/// An agent name is a TOML bare key and reads well in URLs and commands.
fn check_agent_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        bail!(
            "agent name {name:?}: use letters, digits, `_` and `-`, starting with a letter (e.g. support_bot)"
        );
    }
    Ok(())
}

/// The config for `choices`, as written to `path`.
fn render(choices: &Choices, path: &Path) -> String {
    let (primary, fallback) = choices.provider.models();
    CONFIG_TEMPLATE
        .replace("{{providers}}", &choices.provider.section())
        .replace("{{agent}}", &choices.agent)
        .replace("{{provider}}", choices.provider.name())
        .replace("{{model}}", primary)
        .replace("{{fallback}}", fallback)
        .replace("{{file}}", &path.display().to_string())
}

/// Writes `contents` to a temporary file beside `path` and renames it
/// over, so an interrupted `init` never leaves half a config.
fn write_file(path: &Path, contents: &str) -> Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, contents)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))
}

/// The commands that take the new config from here to a run, as printed.
fn next_commands(choices: &Choices, config: &Path) -> Vec<String> {
    let config = config.display();
    let mut exports = String::from("export TOOLS_URL=http://127.0.0.1:8080");
    match choices.provider {
        Provider::Mock => exports.push_str(" MOCK_MODEL_URL=http://127.0.0.1:8081"),
        Provider::Openai => exports.push_str(" OPENAI_API_KEY=..."),
        Provider::Anthropic => exports.push_str(" ANTHROPIC_API_KEY=..."),
    }
    vec![
        exports,
        format!("rein check {config} --explain"),
        format!(
            "rein run --config {config} --agent {} --input \"Move order A-1001 to 2026-01-08T14:00:00Z\"",
            choices.agent
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(script: &str, given: (Option<String>, Option<Provider>)) -> (Result<Choices>, String) {
        let mut prompt = Vec::new();
        let choices = ask(&mut script.as_bytes(), &mut prompt, given);
        (choices, String::from_utf8_lossy(&prompt).into_owned())
    }

    #[test]
    fn empty_answers_take_the_defaults() {
        let (choices, prompt) = asked("\n\n", (None, None));
        assert_eq!(
            choices.ok(),
            Some(Choices {
                agent: "assistant".to_owned(),
                provider: Provider::Mock
            })
        );
        assert!(prompt.contains("Agent name [assistant]: "), "{prompt}");
        assert!(
            prompt.contains("Model provider (mock, openai, anthropic) [mock]: "),
            "{prompt}"
        );
    }

    #[test]
    fn a_wrong_answer_is_asked_again_and_flags_are_not_asked() {
        let (choices, prompt) = asked("9lives\nsupport\n", (None, Some(Provider::Anthropic)));
        assert_eq!(
            choices.ok(),
            Some(Choices {
                agent: "support".to_owned(),
                provider: Provider::Anthropic
            })
        );
        assert!(prompt.contains("agent name \"9lives\""), "{prompt}");
        assert!(!prompt.contains("Model provider"), "{prompt}");
    }

    #[test]
    fn the_end_of_the_input_is_an_error_not_a_default() {
        let (choices, _) = asked("", (None, None));
        let err = choices.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("--yes"), "{err}");
    }

    #[test]
    fn every_placeholder_is_filled() {
        for provider in Provider::ALL {
            let choices = Choices {
                agent: "a".to_owned(),
                provider,
            };
            let config = render(&choices, Path::new("rein.toml"));
            assert!(!config.contains("{{"), "{provider:?}: {config}");
            assert!(
                config.contains(&format!("[providers.{}]", provider.name())),
                "{config}"
            );
        }
    }
}
