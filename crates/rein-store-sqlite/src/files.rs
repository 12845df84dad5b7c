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
//! chosen it (a group that reads backups); [`warn_if_world_readable`]
//! warns, at every open, about a database (or its `-wal`, `-shm`) anyone
//! can read, whichever command opened it.

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

/// The database file `path` and its `-wal` and `-shm` beside it.
fn database_files(path: &Path) -> [std::path::PathBuf; 3] {
    let beside = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    [path.to_path_buf(), beside("-wal"), beside("-shm")]
}

/// The files of the database at `path` (itself, `-wal`, `-shm`) that every
/// local user may read.
pub fn world_readable_files(path: &Path) -> Vec<std::path::PathBuf> {
    database_files(path)
        .into_iter()
        .filter(|file| is_world_readable(file))
        .collect()
}

/// Logs a warning (`tracing`, level `warn`) naming the files of the
/// database at `path` that every local user may read.
pub(super) fn warn_if_world_readable(path: &Path) {
    let readable = world_readable_files(path);
    if readable.is_empty() {
        return;
    }
    let files: Vec<String> = readable.iter().map(|f| f.display().to_string()).collect();
    tracing::warn!(
        files = %files.join(", "),
        "the run store is readable by every local user (it holds prompts, tool results \
         and completions); `chmod 600` these files"
    );
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

    /// A writer the test reads back: what a `tracing` subscriber wrote.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn opening_a_store_anyone_may_read_warns_naming_each_readable_file() {
        let root = tempfile::tempdir().unwrap();
        let db = root.path().join("rein.db");
        // Held open for the whole test: SQLite deletes the -wal when the
        // last connection closes, and a store closes on its own worker
        // thread after it is dropped, so a -wal that only a dropped store
        // had could vanish (and come back private) under the chmod below.
        let _held = crate::SqliteStore::open(&db).unwrap();
        let wal = root.path().join("rein.db-wal");
        assert!(
            wal.exists(),
            "WAL mode keeps a -wal while the store is open"
        );
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let open = || drop(crate::SqliteStore::open(&db).unwrap());
        tracing::subscriber::with_default(subscriber, || {
            open();
            assert!(captured.0.lock().unwrap().is_empty(), "a private store");
            // Only the -wal left readable (a chmod that missed it).
            fs::set_permissions(&wal, fs::Permissions::from_mode(0o644)).unwrap();
            open();
        });
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("WARN"), "{log}");
        assert!(log.contains("readable by every local user"), "{log}");
        assert!(log.contains("rein.db-wal"), "{log}");
        assert!(
            !log.contains("rein.db,"),
            "the database itself is private: {log}"
        );
        assert_eq!(mode(&db), FILE_MODE, "left alone");
    }
}
