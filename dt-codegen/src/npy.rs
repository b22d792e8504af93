//! `.npy` files in and out of [`Tensor`]s (f32 and f16 arrays; bf16 has no numpy dtype, so it
//! travels as f32 and is rounded on the way in and out).

use dt_core::tensor::Tensor;
use dt_core::DType;
use npyz::WriterBuilder;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom};
use std::path::Path;

/// Reads an f32 or f16 array; returns its values widened to f32 and its element type.
pub fn read(path: &Path) -> Result<(Tensor, DType), String> {
    let mut file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(shape) = header_shape(&mut file, path)? {
        check_count(path, &shape)?;
    }
    file.seek(SeekFrom::Start(0)).map_err(|e| format!("{}: {e}", path.display()))?;
    let npy = npyz::NpyFile::new(BufReader::new(file)).map_err(|e| format!("{}: not a .npy file: {e}", path.display()))?;
    if npy.order() != npyz::Order::C {
        return Err(format!("{}: Fortran-ordered arrays are not supported; save with np.ascontiguousarray", path.display()));
    }
    // The header's shape, checked before any data is read: no product that wraps around, and no
    // more elements than a kernel takes.
    check_count(path, npy.shape())?;
    let shape: Vec<usize> = npy.shape().iter().map(|&n| n as usize).collect();
    let descr = npy.dtype().descr();
    let (data, dtype) = match descr.as_str() {
        "'<f4'" => (npy.into_vec::<f32>().map_err(|e| format!("{}: {e}", path.display()))?, DType::F32),
        "'<f2'" => (
            npy.into_vec::<half::f16>().map_err(|e| format!("{}: {e}", path.display()))?.into_iter().map(|v| v.to_f32()).collect(),
            DType::F16,
        ),
        other => return Err(format!("{}: element type {other} is not supported; use float32 or float16", path.display())),
    };
    if data.len() != shape.iter().product::<usize>() {
        return Err(format!("{}: data does not match shape {shape:?}", path.display()));
    }
    Ok((Tensor { shape, data }, dtype))
}

fn check_count(path: &Path, shape: &[u64]) -> Result<(), String> {
    let count = shape.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n));
    if count.is_none_or(|c| c > dt_core::tensor::MAX_ELEMENTS as u64) {
        return Err(format!("{}: shape {shape:?} has more than 2^31 elements", path.display()));
    }
    Ok(())
}

/// The `'shape'` tuple of a `.npy` header, read before npyz parses it: npyz multiplies the
/// extents unchecked, which panics where overflow checks are on, and allocates the header's
/// stated length before reading it, so a header longer than the file is refused here.
/// `Ok(None)` where the header is not one this reads (npyz then reports what is wrong with it).
fn header_shape(file: &mut File, path: &Path) -> Result<Option<Vec<u64>>, String> {
    let mut start = [0u8; 12];
    if file.read_exact(&mut start).is_err() || &start[..6] != b"\x93NUMPY" {
        return Ok(None);
    }
    // Version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one.
    let (len, skip) = match start[6] {
        1 => (u16::from_le_bytes([start[8], start[9]]) as u64, 10),
        _ => (u32::from_le_bytes([start[8], start[9], start[10], start[11]]) as u64, 12),
    };
    let size = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    if skip + len > size {
        return Err(format!(
            "{}: not a .npy file: its header says {len} bytes, and the file ends {} bytes after its start",
            path.display(),
            size.saturating_sub(skip)
        ));
    }
    let mut header = vec![0u8; len.min(1 << 20) as usize];
    let read = file.seek(SeekFrom::Start(skip)).and_then(|_| file.read_exact(&mut header));
    let Some(text) = read.ok().and_then(|_| std::str::from_utf8(&header).ok()) else { return Ok(None) };
    let shape = || -> Option<Vec<u64>> {
        let tuple = text.split_once("'shape'")?.1.split_once('(')?.1.split_once(')')?.0;
        tuple.split(',').map(str::trim).filter(|n| !n.is_empty()).map(|n| n.trim_end_matches('L').parse().ok()).collect()
    };
    Ok(shape())
}

/// Writes a tensor as `.npy` of the given element type (bf16 as f32), whole or not at all
/// ([`crate::host::write_atomically`]).
pub fn write(path: &Path, t: &Tensor, dtype: DType) -> Result<(), String> {
    let mut bytes = Vec::new();
    encode(&mut bytes, t, dtype).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::host::write_atomically(path, &bytes)
}

fn encode(out: &mut Vec<u8>, t: &Tensor, dtype: DType) -> Result<(), String> {
    let err = |e: std::io::Error| e.to_string();
    let file = BufWriter::new(out);
    let shape: Vec<u64> = t.shape.iter().map(|&n| n as u64).collect();
    match dtype {
        DType::F16 => {
            let mut w = npyz::WriteOptions::new().default_dtype().shape(&shape).writer(file).begin_nd().map_err(err)?;
            w.extend(t.data.iter().map(|&v| half::f16::from_f32(v))).map_err(err)?;
            w.finish().map_err(err)
        }
        DType::F32 | DType::BF16 => {
            let mut w = npyz::WriteOptions::new().default_dtype().shape(&shape).writer(file).begin_nd().map_err(err)?;
            w.extend(t.data.iter().copied()).map_err(err)?;
            w.finish().map_err(err)
        }
    }
}
