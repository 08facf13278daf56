//! Decompressing a record batch's records, within a bound.
//!
//! Producers compress batches (`compression.type`: gzip, snappy, lz4, zstd — Weir's own
//! sink takes the setting from the user), so the log reader must read compressed batches to
//! find a re-send's header or to fold a topic's committed records. kafka-protocol's own
//! codecs read a batch to its end, however far it expands, and trust snappy's length
//! prefixes; a few KiB of gzip or zstd can claim gigabytes. Here every codec stops at
//! [`MAX_DECOMPRESSED_BATCH`] (or a smaller limit a caller sets), so what is allocated
//! follows the limit, never the bytes' claims.

use std::io::Read;

use kafka_protocol::records::Compression;

/// The most bytes one batch's records may decompress to. Kafka bounds a batch's compressed
/// size (`message.max.bytes`, 1 MiB by default) but not what it expands to; 64 MiB is far
/// above any batch a producer builds (librdkafka's `batch.size` is 1 MB of records).
pub(super) const MAX_DECOMPRESSED_BATCH: usize = 64 << 20;

/// zstd's window may be at most 2^this bytes (16 MiB). A frame's header names its window
/// size, and the decoder allocates it; Kafka's producers compress without long-distance
/// matching, whose windows stay far below this.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The magic that opens snappy data framed by Java's xerial `SnappyOutputStream`, which
/// Kafka's Java producer writes (librdkafka writes raw snappy blocks).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// The xerial header: magic, version and minimum compatible version (two `INT32`).
const XERIAL_HEADER: usize = 16;

/// `records`, a batch's records region compressed with `compression`, decompressed; an
/// error if the bytes are not valid for the codec or expand past `limit` bytes.
pub(super) fn decompress(
    records: &[u8],
    compression: Compression,
    limit: usize,
) -> Result<Vec<u8>, String> {
    match compression {
        Compression::None => bounded_copy(records, limit),
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(records), limit),
        Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(records), limit),
        Compression::Zstd => {
            let mut decoder =
                zstd::stream::read::Decoder::with_buffer(records).map_err(|e| e.to_string())?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| e.to_string())?;
            read_bounded(decoder, limit)
        }
        Compression::Snappy => snappy(records, limit),
    }
    .map_err(|e| format!("cannot decompress its {compression:?} records: {e}"))
}

fn bounded_copy(records: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    if records.len() > limit {
        return Err(too_large(limit));
    }
    Ok(records.to_vec())
}

fn too_large(limit: usize) -> String {
    format!("they expand to more than {limit} bytes")
}

/// Reads `decoder` to its end, failing once it yields more than `limit` bytes: it reads one
/// byte past the limit at most, so the buffer never grows beyond it.
fn read_bounded(decoder: impl Read, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    decoder
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() > limit {
        return Err(too_large(limit));
    }
    Ok(out)
}

/// Raw snappy, or xerial's framing of it: after the header, blocks of an `INT32` length and
/// that many bytes of raw snappy.
fn snappy(records: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let Some(mut rest) = records
        .strip_prefix(XERIAL_MAGIC.as_slice())
        .map(|_| records.get(XERIAL_HEADER..).unwrap_or_default())
    else {
        return snappy_block(records, limit, Vec::new());
    };
    if records.len() < XERIAL_HEADER {
        return Err("the xerial snappy header is cut short".into());
    }
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (length, after) = rest
            .split_first_chunk::<4>()
            .ok_or("a xerial snappy block's length is cut short")?;
        let length = usize::try_from(i32::from_be_bytes(*length))
            .map_err(|_| "a xerial snappy block has a negative length")?;
        if length > after.len() {
            return Err(format!(
                "a xerial snappy block claims {length} bytes, {} are left",
                after.len()
            ));
        }
        let (block, next) = after.split_at(length);
        out = snappy_block(block, limit, out)?;
        rest = next;
    }
    Ok(out)
}

/// Appends raw snappy `block`, decompressed, to `out`, checking the length it claims against
/// what `limit` leaves before allocating.
fn snappy_block(block: &[u8], limit: usize, mut out: Vec<u8>) -> Result<Vec<u8>, String> {
    let claimed = snap::raw::decompress_len(block).map_err(|e| e.to_string())?;
    if claimed > limit - out.len() {
        return Err(too_large(limit));
    }
    let start = out.len();
    out.resize(start + claimed, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| e.to_string())?;
    out.truncate(start + written);
    Ok(out)
}

/// `data` compressed as a producer compresses a batch's records (raw snappy, as librdkafka
/// writes it): what the tests and the fuzz seeds feed the reader.
pub(super) fn compress(data: &[u8], compression: Compression) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    match compression {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(data)?;
            encoder.finish()
        }
        Compression::Snappy => Ok(snap::raw::Encoder::new().compress_vec(data)?),
        Compression::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            encoder.write_all(data)?;
            encoder.finish().map_err(std::io::Error::other)
        }
        Compression::Zstd => zstd::encode_all(data, 3),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// `data` compressed as a producer would.
    pub(crate) fn compress(data: &[u8], compression: Compression) -> Vec<u8> {
        super::compress(data, compression).unwrap()
    }

    fn sample() -> Vec<u8> {
        (0..100_000u32)
            .flat_map(|i| format!("record {i} of the sample;").into_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let data = sample();
        for codec in CODECS {
            let compressed = compress(&data, codec);
            assert_eq!(
                decompress(&compressed, codec, MAX_DECOMPRESSED_BATCH).unwrap(),
                data,
                "{codec:?}"
            );
        }
    }

    #[test]
    fn data_expanding_past_the_limit_is_refused_for_every_codec() {
        // A bomb: 8 MiB of zeros compress to a few KiB.
        let zeros = vec![0u8; 8 << 20];
        for codec in CODECS {
            let compressed = compress(&zeros, codec);
            let error = decompress(&compressed, codec, 1 << 20).unwrap_err();
            assert!(
                error.contains("expand to more than 1048576 bytes"),
                "{codec:?}: {error}"
            );
            assert!(decompress(&compressed, codec, 8 << 20).is_ok(), "{codec:?}");
        }
    }

    #[test]
    fn a_snappy_length_claim_past_the_limit_allocates_nothing() {
        // A raw snappy block whose varint length prefix claims 2^32 - 1 bytes.
        let claim = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let error = decompress(&claim, Compression::Snappy, MAX_DECOMPRESSED_BATCH).unwrap_err();
        assert!(error.contains("expand to more than"), "{error}");
    }

    #[test]
    fn xerial_framed_snappy_is_read_block_by_block() {
        let data = sample();
        let (first, second) = data.split_at(data.len() / 3);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1i32.to_be_bytes());
        framed.extend_from_slice(&1i32.to_be_bytes());
        for part in [first, second] {
            let block = snap::raw::Encoder::new().compress_vec(part).unwrap();
            framed.extend_from_slice(&(block.len() as i32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(
            decompress(&framed, Compression::Snappy, MAX_DECOMPRESSED_BATCH).unwrap(),
            data
        );
        // A block claiming more than is left, and a header cut short.
        let mut lying = framed[..XERIAL_HEADER].to_vec();
        lying.extend_from_slice(&1000i32.to_be_bytes());
        lying.extend_from_slice(&[0; 10]);
        let error = decompress(&lying, Compression::Snappy, MAX_DECOMPRESSED_BATCH).unwrap_err();
        assert!(error.contains("claims 1000 bytes, 10 are left"), "{error}");
        assert!(decompress(&framed[..12], Compression::Snappy, 1 << 20)
            .unwrap_err()
            .contains("cut short"));
    }

    #[test]
    fn corrupt_data_is_an_error_naming_the_codec_for_every_codec() {
        let data = sample();
        for codec in CODECS.into_iter().skip(1) {
            let mut compressed = compress(&data, codec);
            let middle = compressed.len() / 2;
            compressed.truncate(middle);
            let result = decompress(&compressed, codec, MAX_DECOMPRESSED_BATCH);
            // Cut short, no codec can yield all of the data.
            match result {
                Err(e) => assert!(e.contains(&format!("{codec:?}")), "{e}"),
                Ok(out) => assert_ne!(out, data, "{codec:?}"),
            }
        }
    }

    #[test]
    fn a_zstd_frame_asking_for_a_huge_window_is_refused() {
        // A frame header whose window descriptor asks for 2^27 bytes (exponent 17, plus 10):
        // zstd's own default limit allows it, ours does not.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 17 << 3, 0, 0, 0, 0];
        let error = decompress(&frame, Compression::Zstd, MAX_DECOMPRESSED_BATCH).unwrap_err();
        assert!(error.contains("too much memory"), "{error}");
    }
}
