//! The child's environment and the program's path.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::attempt::duration_ms;
use super::{
    ATTEMPT_ENV, ATTEMPT_ID_ENV, Attempt, CommandTarget, DEADLINE_ENV, IDEMPOTENCY_KEY_ENV,
    INHERITED_ENV, INTENT_ID_ENV, RUN_ID_ENV,
};

/// The environment of the child: the inherited few, the tool's own, and
/// rein's correlation variables (which win).
pub(super) fn child_env(
    target: &CommandTarget,
    attempt: &Attempt<'_>,
    limit: Duration,
) -> BTreeMap<String, OsString> {
    let mut env: BTreeMap<String, OsString> = INHERITED_ENV
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), std::env::var_os(name)?)))
        .collect();
    for (name, value) in &target.env {
        env.insert(name.clone(), value.into());
    }
    let mut set = |name: &str, value: &str| {
        env.insert(name.to_owned(), value.into());
    };
    set(RUN_ID_ENV, attempt.run_id.as_str());
    set(INTENT_ID_ENV, attempt.intent_id.as_str());
    set(ATTEMPT_ENV, &attempt.number.to_string());
    set(ATTEMPT_ID_ENV, attempt.attempt_id.as_str());
    set(DEADLINE_ENV, &duration_ms(limit).to_string());
    if let Some(key) = attempt.key {
        set(IDEMPOTENCY_KEY_ENV, key.as_str());
    } else {
        env.remove(IDEMPOTENCY_KEY_ENV);
    }
    env
}

/// The absolute path of an executable `program`: a path is taken relative
/// to `working_dir` (or the current directory); a bare name is searched in
/// the absolute directories of `path`.
pub(super) fn resolve_program(
    program: &Path,
    working_dir: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, String> {
    if program.as_os_str().is_empty() {
        return Err("the program is empty".to_owned());
    }
    let is_bare = program.components().count() == 1 && !program.is_absolute();
    if !is_bare {
        let candidate = if program.is_absolute() {
            program.to_path_buf()
        } else {
            let base = match working_dir {
                Some(dir) if dir.is_absolute() => dir.to_path_buf(),
                Some(dir) => std::env::current_dir()
                    .map_err(|e| format!("cannot read the current directory: {e}"))?
                    .join(dir),
                None => std::env::current_dir()
                    .map_err(|e| format!("cannot read the current directory: {e}"))?,
            };
            base.join(program)
        };
        return if is_executable(&candidate) {
            Ok(candidate)
        } else {
            Err(format!("{} is not an executable file", candidate.display()))
        };
    }
    std::env::split_paths(path.unwrap_or_default())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| format!("program `{}` was not found on PATH", program.display()))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_programs_are_found_on_absolute_path_entries_only() {
        let found = resolve_program(
            Path::new("sh"),
            None,
            Some("relative:/bin:/usr/bin".as_ref()),
        );
        assert!(found.unwrap().is_absolute());
        assert!(resolve_program(Path::new("sh"), None, Some("relative".as_ref())).is_err());
        assert!(
            resolve_program(
                Path::new("no-such-program-rein"),
                None,
                Some("/bin".as_ref())
            )
            .is_err()
        );
        assert!(resolve_program(Path::new(""), None, None).is_err());
    }

    #[test]
    fn paths_are_relative_to_the_working_dir() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("tool.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert!(resolve_program(Path::new("./tool.sh"), Some(dir.path()), None).is_err());
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve_program(Path::new("./tool.sh"), Some(dir.path()), None).unwrap(),
            dir.path().join("./tool.sh")
        );
        assert_eq!(resolve_program(&script, None, None).unwrap(), script);
    }
}
