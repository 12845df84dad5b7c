//! The `--help` of every command and subcommand, pinned as snapshots
//! (`tests/snapshots/help__*.snap`): a change to what a user reads is a
//! change a reviewer sees in the diff, not a side effect.
//!
//! The commands are found by walking `rein --help`'s own lists, so a new
//! command is pinned as soon as it exists (its first run writes the
//! snapshot with `INSTA_UPDATE=always`; under CI a missing or changed one
//! fails).
//!
//! Every command's help also shows examples (an `Examples:` section);
//! only pure command groups, whose help lists `Commands:`, may go without.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// `rein <path> --help`, which must succeed.
fn help(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(path)
        .arg("--help")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "rein {path:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists under `Commands:` (`help` aside).
fn subcommands(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Whether a help text is a pure command group's: it lists `Commands:`,
/// and each of those shows its own examples.
fn is_group(text: &str) -> bool {
    text.lines().any(|l| l.trim() == "Commands:")
}

/// Whether a help text has an `Examples:` section: the heading on a line
/// of its own, an indented example under it (a doc comment's examples
/// reflowed into one paragraph by clap do not count).
fn shows_examples(text: &str) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .any(|w| w[0] == "Examples:" && w[1].starts_with("  ") && !w[1].trim().is_empty())
}

/// The options of a help text (its lines that start with a flag), each
/// with the lines of its description.
fn options(text: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if (2..=6).contains(&indent) && trimmed.starts_with('-') {
            found.push((trimmed.to_owned(), String::new()));
        } else if let Some((_, description)) = found.last_mut() {
            description.push_str(trimmed);
            description.push('\n');
        }
    }
    found
}

/// One spelling per concept: a command that takes a config takes it as
/// `-c, --config`, one that reads a store as `--data` with `--db` beside
/// it.
fn inconsistencies(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (flag, description) in options(text) {
        if flag.starts_with("--config <") {
            found.push("--config without its short -c".to_owned());
        }
        if flag.starts_with("--data <") && !description.contains("--db") {
            found.push("--data without its alias --db".to_owned());
        }
    }
    found
}

#[test]
fn every_commands_help_is_pinned_and_shows_an_example() {
    let mut pending = vec![Vec::<String>::new()];
    let mut seen = 0;
    let mut without_example = Vec::new();
    let mut inconsistent = Vec::new();
    while let Some(path) = pending.pop() {
        let text = help(&path);
        let name = if path.is_empty() {
            "rein".to_owned()
        } else {
            path.join("_")
        };
        insta::assert_snapshot!(name, text);
        seen += 1;
        if !is_group(&text) && !shows_examples(&text) {
            without_example.push(format!("rein {}", path.join(" ")));
        }
        inconsistent.extend(
            inconsistencies(&text)
                .into_iter()
                .map(|why| format!("rein {}: {why}", path.join(" "))),
        );
        for sub in subcommands(&text) {
            let mut next = path.clone();
            next.push(sub);
            pending.push(next);
        }
    }
    assert!(seen > 25, "only {seen} help texts found");
    inconsistent.sort();
    assert!(
        inconsistent.is_empty(),
        "flags spelled otherwise than everywhere else:\n{}",
        inconsistent.join("\n")
    );
    without_example.sort();
    assert!(
        without_example.is_empty(),
        "these commands' --help shows no `Examples:` section: {}",
        without_example.join(", ")
    );
}

/// `--color` reaches clap's own help, in either spelling; `never` wins
/// over a terminal, `always` over a pipe.
#[test]
fn color_is_what_color_says() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(args)
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let escapes = |text: &str| text.contains('\u{1b}');
    assert!(escapes(&run(&["--color", "always", "key", "--help"])));
    assert!(escapes(&run(&["key", "--help", "--color=always"])));
    assert!(!escapes(&run(&["--color", "never", "key", "--help"])));
    // Auto into a pipe: none.
    assert!(!escapes(&run(&["key", "--help"])));
}
