//! The store's directory and file, private to the user running rein.
//!
//! # Why
//!
//! The database holds prompts, tool results and model completions. Created
//! with the process umask (typically `022`) it is readable by every local
//! user, so rein creates its directory `0700` and the file `0600`, setting
//! the mode explicitly after creating (a umask can only take bits away, so
//! `chmod` is what makes it umask-independent). SQLite creates the `-wal`
//! and `-shm` files beside it with the database file's own mode. A file or
//! directory that already exists keeps its mode: the operator may have
//! chosen it (a group that reads backups); [`is_world_readable`] lets the
//! server warn about a database anyone can read.

use std::fs;
use std::io;
use std::path::Path;

/// The mode of a directory rein creates for a store.
pub const DIRECTORY_MODE: u32 = 0o700;
/// The mode of a database file rein creates.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) private to this user, unless it
/// exists.
pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(DIRECTORY_MODE);
    }
    builder.create(dir)?;
    set_mode(dir, DIRECTORY_MODE)
}

/// Creates the empty file `path` private to this user, unless it exists
/// (SQLite takes an empty file for a new database).
pub(super) fn create_private_file(path: &Path) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(FILE_MODE);
    }
    match options.open(path) {
        Ok(_) => set_mode(path, FILE_MODE),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether every local user may read `path` (its mode has `o+r`); `false`
/// off Unix or when it cannot be read.
pub fn is_world_readable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = (path, mode);
        Ok(())
    }
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_directory_and_file_are_private_and_existing_ones_keep_their_mode() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), DIRECTORY_MODE);
        let file = dir.join("rein.db");
        create_private_file(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        assert!(!is_world_readable(&file));
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        create_private_file(&file).unwrap();
        assert_eq!(mode(&file), 0o644, "an existing file keeps its mode");
        assert!(is_world_readable(&file));
    }
}
