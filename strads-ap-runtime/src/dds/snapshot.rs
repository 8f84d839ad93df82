//! DDS snapshot files (`DVector::save`/`load`, `DMap::save`/`load`): a header naming the
//! kind, element type, length and checksum, then the elements; written atomically.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::util::fnv1a;

const MAGIC: &[u8; 8] = b"STRADSv1";

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    kind: String,
    element: String,
    len: u64,
    checksum: u64,
}

/// Runs `f` on the driver (rank 0) only and gives its outcome to every rank (a
/// collective); in a world of one (`comm` is `None`) simply runs `f`. A failure on rank 0
/// is an error naming `op` on every rank.
pub(crate) fn on_driver<R: serde::Serialize + serde::de::DeserializeOwned>(
    comm: Option<&crate::cluster::collective::Comm>,
    op: &str,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let Some(comm) = comm else {
        return f();
    };
    let outcome: std::result::Result<Option<R>, String> = if comm.rank() == 0 {
        f().map(Some).map_err(|e| e.to_string())
    } else {
        Ok(None)
    };
    match comm.broadcast(0, outcome)? {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(Error::Transport(format!("{op}: rank 0 sent no outcome"))),
        Err(e) => Err(Error::Config(format!("{op} on rank 0: {e}"))),
    }
}

/// Writes a snapshot atomically: temp file, fsync, rename.
pub(crate) fn save_snapshot<T: serde::Serialize>(
    path: &Path,
    kind: &str,
    items: &[T],
) -> Result<()> {
    let payload = postcard::to_stdvec(items).map_err(|e| Error::Codec {
        what: format!("{kind} for {}", path.display()),
        message: e.to_string(),
    })?;
    let header = Header {
        kind: kind.to_string(),
        element: std::any::type_name::<T>().to_string(),
        len: items.len() as u64,
        checksum: fnv1a(&payload),
    };
    let header = postcard::to_stdvec(&header).map_err(|e| Error::Codec {
        what: "snapshot header".into(),
        message: e.to_string(),
    })?;
    let tmp: PathBuf = {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".tmp.{}", std::process::id()));
        path.with_file_name(name)
    };
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&(header.len() as u32).to_le_bytes())?;
        f.write_all(&header)?;
        f.write_all(&payload)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// Reads a snapshot, checking magic, kind, element type, length and checksum.
pub(crate) fn load_snapshot<T: serde::de::DeserializeOwned>(
    path: &Path,
    kind: &str,
) -> Result<Vec<T>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |message: String| Error::BadSnapshot {
        path: path.to_path_buf(),
        message,
    };
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        return Err(bad("not a strads-ap snapshot (bad magic)".into()));
    }
    let hlen = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let body = bytes
        .get(12..12 + hlen)
        .ok_or_else(|| bad("truncated header".into()))?;
    let header: Header = postcard::from_bytes(body).map_err(|e| bad(format!("bad header: {e}")))?;
    if header.kind != kind {
        return Err(bad(format!("holds a {}, not a {kind}", header.kind)));
    }
    let element = std::any::type_name::<T>();
    if header.element != element {
        return Err(bad(format!(
            "holds elements of type {}, but {element} was asked for",
            header.element
        )));
    }
    let payload = &bytes[12 + hlen..];
    if fnv1a(payload) != header.checksum {
        return Err(bad(
            "checksum mismatch: the file is damaged or truncated".into()
        ));
    }
    let items: Vec<T> =
        postcard::from_bytes(payload).map_err(|e| bad(format!("bad payload: {e}")))?;
    if items.len() as u64 != header.len {
        return Err(bad(format!(
            "header says {} elements, payload has {}",
            header.len,
            items.len()
        )));
    }
    Ok(items)
}
