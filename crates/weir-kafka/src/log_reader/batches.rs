//! The pure side of reading a partition's raw log: splitting fetched bytes into record
//! batches, decoding them, and deciding from the batches and their control markers which
//! records are committed and how a transaction ended — free of I/O, so that every rule is
//! tested on encoded batches.

use std::collections::HashMap;

use bytes::{Buf, Bytes};
use kafka_protocol::records::{BatchDecodeInfo, Compression, RecordBatchDecoder};

use super::compression::{decompress, MAX_DECOMPRESSED_BATCH};
use super::response_guard::{check_batch, check_records, BATCH_HEADER};
use super::{LogRecord, TransactionOutcome};

/// A batch of the raw log with what matters for transactions.
#[derive(Debug, Clone)]
pub(super) struct RawBatch {
    pub(super) info: BatchDecodeInfo,
    /// Offset of the batch's last record.
    pub(super) last_offset: i64,
    /// The whole encoded batch, decoded lazily (data batches may be compressed).
    pub(super) bytes: Bytes,
}

/// Header on the records the exactly-once sink sends again after the broker aborted their
/// transaction: `topic/partition/offset` of the original transaction's probe record, so that a
/// later recovery can tell that the re-send happened and committed.
pub const RESEND_HEADER: &str = "weir-resend-of";

/// Follows a partition's batches from the one holding `offset` until the transaction that
/// wrote `offset` ends (see [`LogReader::transaction_outcome`]).
pub(super) struct OutcomeTracker {
    offset: i64,
    /// Producer id, epoch, and last offset seen of the transaction.
    ours: Option<(i64, i16, i64)>,
    pub(super) outcome: TransactionOutcome,
}

impl OutcomeTracker {
    pub(super) fn new(offset: i64) -> Self {
        Self {
            offset,
            ours: None,
            outcome: TransactionOutcome::Unknown,
        }
    }

    /// Takes the next batch; `false` once the outcome is decided.
    pub(super) fn visit(&mut self, batch: &RawBatch) -> Result<bool, String> {
        let Some((producer_id, epoch, after)) = self.ours else {
            if batch.info.control || batch.info.min_offset > self.offset {
                // The record is gone (compacted away).
                self.outcome = TransactionOutcome::Unknown;
                return Ok(false);
            }
            if !batch.info.transactional {
                self.outcome = TransactionOutcome::Committed;
                return Ok(false);
            }
            self.ours = Some((
                batch.info.producer_id,
                batch.info.producer_epoch,
                batch.last_offset,
            ));
            self.outcome = TransactionOutcome::Open;
            return Ok(true);
        };
        if batch.info.producer_id != producer_id || batch.info.min_offset <= after {
            return Ok(true);
        }
        if batch.info.control {
            self.outcome = control_outcome(batch)?;
            return Ok(false);
        }
        if batch.info.producer_epoch > epoch {
            // A newer epoch of the producer writes: ours ended without committing.
            self.outcome = TransactionOutcome::Aborted;
            return Ok(false);
        }
        Ok(true)
    }
}

/// Looks for a committed re-send carrying [`RESEND_HEADER`] = `marker`.
pub(super) struct ResendTracker<'a> {
    marker: &'a str,
    /// Re-send transactions seen, by producer id: their epoch.
    candidates: HashMap<i64, i16>,
    pub(super) committed: bool,
}

impl<'a> ResendTracker<'a> {
    pub(super) fn new(marker: &'a str) -> Self {
        Self {
            marker,
            candidates: HashMap::new(),
            committed: false,
        }
    }

    pub(super) fn visit(&mut self, batch: &RawBatch) -> Result<bool, String> {
        let producer_id = batch.info.producer_id;
        if batch.info.control {
            if self.candidates.remove(&producer_id).is_some()
                && control_outcome(batch)? == TransactionOutcome::Committed
            {
                self.committed = true;
                return Ok(false);
            }
            return Ok(true);
        }
        if self
            .candidates
            .get(&producer_id)
            .is_some_and(|epoch| *epoch < batch.info.producer_epoch)
        {
            self.candidates.remove(&producer_id);
        }
        if batch.info.transactional && !self.candidates.contains_key(&producer_id) {
            let carries = decode_records(batch)?.iter().any(|r| {
                r.headers.iter().any(|(k, v)| {
                    k == RESEND_HEADER && v.as_deref() == Some(self.marker.as_bytes())
                })
            });
            if carries {
                self.candidates
                    .insert(producer_id, batch.info.producer_epoch);
            }
        }
        Ok(true)
    }
}

/// The committed records of a partition's batches: non-transactional records, and those of
/// transactions whose producer's next control marker is COMMIT; records of aborted or still
/// open transactions are left out.
pub(super) fn fold_committed(batches: Vec<RawBatch>) -> Result<Vec<LogRecord>, String> {
    let mut committed = Vec::new();
    // Transactional records wait here, per producer, for their marker.
    let mut open: HashMap<i64, Vec<LogRecord>> = HashMap::new();
    for batch in batches {
        if batch.info.control {
            let outcome = control_outcome(&batch)?;
            let pending = open.remove(&batch.info.producer_id).unwrap_or_default();
            if outcome == TransactionOutcome::Committed {
                committed.extend(pending);
            }
            continue;
        }
        let records = decode_records(&batch)?;
        if batch.info.transactional {
            open.entry(batch.info.producer_id)
                .or_default()
                .extend(records);
        } else {
            committed.extend(records);
        }
    }
    committed.sort_by_key(|r| r.offset);
    Ok(committed)
}

/// Splits a fetch response's record bytes into batches (a trailing partial batch, which
/// brokers may send when a size limit cuts it, is dropped).
pub(super) fn split_batches(mut records: Bytes, out: &mut Vec<RawBatch>) -> Result<(), String> {
    const HEADER: usize = 12;
    while records.len() >= HEADER {
        let length = i32::from_be_bytes([records[8], records[9], records[10], records[11]]);
        let length = usize::try_from(length).map_err(|_| "negative batch length".to_string())?;
        if records.len() < HEADER + length {
            break;
        }
        let mut bytes = records.split_to(HEADER + length);
        let whole = bytes.clone();
        let infos = RecordBatchDecoder::decode_batch_info(&mut bytes)
            .map_err(|e| format!("bad record batch: {e}"))?;
        let Some(info) = infos.into_iter().next() else {
            return Err("record batch of an unsupported (pre-0.11) format".into());
        };
        let last_offset_delta = if whole.len() >= 27 {
            i32::from_be_bytes([whole[23], whole[24], whole[25], whole[26]])
        } else {
            0
        };
        out.push(RawBatch {
            last_offset: info.min_offset + i64::from(last_offset_delta),
            info,
            bytes: whole,
        });
    }
    Ok(())
}

/// The records of `batch`, decompressed first when its producer compressed them.
pub(super) fn decode_records(batch: &RawBatch) -> Result<Vec<LogRecord>, String> {
    decode_records_within(batch, MAX_DECOMPRESSED_BATCH)
}

/// [`decode_records`], with the records' decompressed size bounded by `limit`.
pub(super) fn decode_records_within(
    batch: &RawBatch,
    limit: usize,
) -> Result<Vec<LogRecord>, String> {
    let at = batch.info.min_offset;
    let compression = batch.info.compression;
    let mut bytes = batch.bytes.clone();
    let decoded = if compression == Compression::None {
        check_batch(&batch.bytes).map_err(|e| format!("malformed batch at offset {at}: {e}"))?;
        RecordBatchDecoder::decode(&mut bytes)
    } else {
        // The batch's CRC was checked when it was split off (`decode_batch_info`), so these
        // are the producer's bytes; kafka-protocol is handed them decompressed.
        let region = batch.bytes.get(BATCH_HEADER..).unwrap_or_default();
        let records = decompress(region, compression, limit)
            .map_err(|e| format!("batch at offset {at}: {e}"))?;
        check_records(&records, batch.info.record_count)
            .map_err(|e| format!("malformed batch at offset {at} ({compression:?}): {e}"))?;
        let records = Bytes::from(records);
        RecordBatchDecoder::decode_with_custom_compression(
            &mut bytes,
            Some(|_: &mut Bytes, _: Compression| Ok(records.clone())),
        )
    };
    let set = decoded.map_err(|e| {
        format!("cannot decode batch at offset {at} ({compression:?} compression): {e}")
    })?;
    Ok(set
        .records
        .into_iter()
        .map(|r| LogRecord {
            offset: r.offset,
            key: r.key,
            value: r.value,
            timestamp: r.timestamp,
            producer_id: r.producer_id,
            headers: r
                .headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
        .collect())
}

/// A control batch's marker: the record key is (version: i16, type: i16), type 0 = ABORT,
/// 1 = COMMIT.
pub(super) fn control_outcome(batch: &RawBatch) -> Result<TransactionOutcome, String> {
    let records = decode_records(batch)?;
    let key = records
        .first()
        .and_then(|r| r.key.clone())
        .ok_or_else(|| format!("control batch at {} has no key", batch.info.min_offset))?;
    let mut key = key;
    if key.len() < 4 {
        return Err(format!(
            "control batch at {} has a short key",
            batch.info.min_offset
        ));
    }
    let _version = key.get_i16();
    match key.get_i16() {
        0 => Ok(TransactionOutcome::Aborted),
        1 => Ok(TransactionOutcome::Committed),
        other => Err(format!(
            "control batch at {} has unknown type {other}",
            batch.info.min_offset
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    use super::super::compression::tests::compress;
    use super::super::fuzzing::batch_around;

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// One encoded batch at `offset`: data records with `values`, or a control marker.
    fn batch(offset: i64, producer_id: i64, transactional: bool, content: Content) -> Vec<u8> {
        batch_of(offset, producer_id, 0, transactional, content, None)
    }

    /// A batch of producer `producer_id` at epoch `epoch`, its records with `header`.
    fn batch_of(
        offset: i64,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        content: Content,
        header: Option<(&str, &str)>,
    ) -> Vec<u8> {
        batch_in(
            Compression::None,
            offset,
            producer_id,
            epoch,
            transactional,
            content,
            header,
        )
    }

    /// [`batch_of`], its records compressed with `codec`.
    fn batch_in(
        codec: Compression,
        offset: i64,
        producer_id: i64,
        epoch: i16,
        transactional: bool,
        content: Content,
        header: Option<(&str, &str)>,
    ) -> Vec<u8> {
        let headers: IndexMap<StrBytes, Option<Bytes>> = header
            .map(|(k, v)| {
                (
                    StrBytes::from_string(k.to_string()),
                    Some(Bytes::from(v.to_string())),
                )
            })
            .into_iter()
            .collect();
        type KeyValue = (Option<Bytes>, Option<Bytes>);
        let (control, entries): (bool, Vec<KeyValue>) = match content {
            Content::Data(values) => (
                false,
                values
                    .iter()
                    .map(|v| (None, Some(Bytes::from(v.to_string()))))
                    .collect(),
            ),
            Content::Marker(commit) => {
                let mut key = BytesMut::new();
                key.extend_from_slice(&0i16.to_be_bytes());
                key.extend_from_slice(&i16::from(commit).to_be_bytes());
                (true, vec![(Some(key.freeze()), Some(Bytes::new()))])
            }
        };
        let records: Vec<Record> = entries
            .into_iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional,
                control,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id,
                producer_epoch: epoch,
                timestamp_type: TimestampType::Creation,
                offset: offset + i as i64,
                sequence: i as i32,
                timestamp: 0,
                key,
                value,
                headers: if control {
                    IndexMap::new()
                } else {
                    headers.clone()
                },
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode_with_custom_compression(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression: codec,
            },
            Some(|clear: &mut BytesMut, out: &mut BytesMut, codec| {
                out.extend_from_slice(&compress(clear, codec));
                Ok(())
            }),
        )
        .unwrap();
        buf.to_vec()
    }

    enum Content {
        Data(Vec<&'static str>),
        Marker(bool),
    }

    fn log(parts: Vec<Vec<u8>>) -> Vec<RawBatch> {
        let bytes: Vec<u8> = parts.into_iter().flatten().collect();
        let mut batches = Vec::new();
        split_batches(Bytes::from(bytes), &mut batches).unwrap();
        batches
    }

    fn values(records: &[LogRecord]) -> Vec<String> {
        records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect()
    }

    #[test]
    fn aborted_and_open_transactions_are_left_out_in_log_order() {
        let batches = log(vec![
            batch(0, 7, true, Content::Data(vec!["a1", "a2"])),
            batch(2, -1, false, Content::Data(vec!["plain"])),
            batch(3, 8, true, Content::Data(vec!["b1"])),
            batch(4, 7, true, Content::Marker(false)),
            batch(5, 8, true, Content::Marker(true)),
            batch(6, 7, true, Content::Data(vec!["c1"])),
            batch(7, 7, true, Content::Marker(true)),
            batch(8, 9, true, Content::Data(vec!["open"])),
        ]);
        assert_eq!(batches.len(), 8);
        assert_eq!(batches[0].last_offset, 1);
        let committed = fold_committed(batches).unwrap();
        assert_eq!(values(&committed), vec!["plain", "b1", "c1"]);
        assert_eq!(
            committed.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![2, 3, 6]
        );
    }

    fn outcome_of(batches: &[RawBatch], offset: i64) -> TransactionOutcome {
        let mut tracker = OutcomeTracker::new(offset);
        for batch in batches.iter().filter(|b| b.last_offset >= offset) {
            if !tracker.visit(batch).unwrap() {
                break;
            }
        }
        tracker.outcome
    }

    fn resend_committed_in(batches: &[RawBatch], after: i64, marker: &str) -> bool {
        let mut tracker = ResendTracker::new(marker);
        for batch in batches.iter().filter(|b| b.info.min_offset > after) {
            if !tracker.visit(batch).unwrap() {
                break;
            }
        }
        tracker.committed
    }

    fn data(offset: i64, producer: i64, epoch: i16, value: &'static str) -> Vec<u8> {
        batch_of(
            offset,
            producer,
            epoch,
            true,
            Content::Data(vec![value]),
            None,
        )
    }

    fn marker(offset: i64, producer: i64, epoch: i16, commit: bool) -> Vec<u8> {
        batch_of(offset, producer, epoch, true, Content::Marker(commit), None)
    }

    #[test]
    fn the_first_marker_of_the_producer_decides_and_a_later_commit_never_counts() {
        use TransactionOutcome::*;
        // Committed, with another producer's batches in between.
        let committed = log(vec![
            data(0, 7, 0, "a"),
            data(1, 8, 0, "x"),
            marker(2, 8, 0, false),
            marker(3, 7, 0, true),
        ]);
        assert_eq!(outcome_of(&committed, 0), Committed);
        assert_eq!(outcome_of(&committed, 1), Aborted);
        // Fenced by a second process sharing the transactional id: its later commit of other
        // data must not count for the aborted transaction.
        let fenced = log(vec![
            data(0, 7, 0, "zombie"),
            marker(1, 7, 1, false),
            data(2, 7, 1, "replacement"),
            marker(3, 7, 1, true),
        ]);
        assert_eq!(outcome_of(&fenced, 0), Aborted);
        assert_eq!(outcome_of(&fenced, 2), Committed);
        // A broker that writes no marker when it fences: the newer epoch's data tells.
        let unmarked = log(vec![
            data(0, 7, 0, "zombie"),
            data(1, 7, 1, "replacement"),
            marker(2, 7, 1, true),
        ]);
        assert_eq!(outcome_of(&unmarked, 0), Aborted);
        // Several batches of one transaction, then no marker yet.
        let open = log(vec![data(0, 7, 0, "a"), data(1, 7, 0, "b")]);
        assert_eq!(outcome_of(&open, 0), Open);
        assert_eq!(outcome_of(&log(vec![marker(5, 7, 0, true)]), 3), Unknown);
    }

    #[test]
    fn a_committed_resend_is_found_by_its_header_and_an_aborted_one_is_not() {
        let resent = |offset, epoch, commit| {
            vec![
                batch_of(
                    offset,
                    7,
                    epoch,
                    true,
                    Content::Data(vec!["a"]),
                    Some((RESEND_HEADER, "t/0/0")),
                ),
                marker(offset + 1, 7, epoch, commit),
            ]
        };
        let mut parts = vec![data(0, 7, 0, "a"), marker(1, 7, 1, false)];
        parts.extend(resent(2, 1, false));
        let aborted_once = log(parts.clone());
        assert!(!resend_committed_in(&aborted_once, 0, "t/0/0"));
        parts.extend(resent(4, 2, true));
        let committed_second_time = log(parts);
        assert!(resend_committed_in(&committed_second_time, 0, "t/0/0"));
        assert!(!resend_committed_in(&committed_second_time, 0, "t/0/9"));
        // Another producer's commit does not confirm a re-send it did not write.
        let other = log(vec![
            data(0, 7, 0, "a"),
            marker(1, 7, 1, false),
            batch_of(
                2,
                7,
                1,
                true,
                Content::Data(vec!["a"]),
                Some((RESEND_HEADER, "t/0/0")),
            ),
            marker(3, 9, 0, true),
        ]);
        assert!(!resend_committed_in(&other, 0, "t/0/0"));
    }

    #[test]
    fn a_partial_trailing_batch_is_dropped_and_garbage_is_an_error() {
        let mut bytes = batch(0, -1, false, Content::Data(vec!["x"]));
        let whole = bytes.len();
        bytes.extend_from_slice(&batch(1, -1, false, Content::Data(vec!["y"]))[..10]);
        let mut batches = Vec::new();
        split_batches(Bytes::from(bytes), &mut batches).unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].bytes.len(), whole);
        let mut corrupt = batch(0, -1, false, Content::Data(vec!["x"]));
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        let mut batches = Vec::new();
        let error = split_batches(Bytes::from(corrupt), &mut batches).unwrap_err();
        assert!(error.contains("Cyclic redundancy check"), "{error}");
    }

    #[test]
    fn compressed_batches_are_folded_and_searched_as_plain_ones_for_every_codec() {
        for codec in CODECS {
            let resend = Some((RESEND_HEADER, "t/0/0"));
            let data = |offset, producer, values, header| {
                batch_in(
                    codec,
                    offset,
                    producer,
                    0,
                    true,
                    Content::Data(values),
                    header,
                )
            };
            let log = log(vec![
                data(0, 7, vec!["a", "b"], resend),
                data(2, 8, vec!["x"], None),
                batch_in(codec, 3, -1, 0, false, Content::Data(vec!["c"]), None),
                marker(4, 8, 0, false),
                marker(5, 7, 0, true),
            ]);
            assert_eq!(log[0].info.compression, codec);
            let committed = fold_committed(log.clone()).unwrap();
            assert_eq!(values(&committed), ["a", "b", "c"], "{codec:?}");
            assert_eq!(committed[0].headers[0].0, RESEND_HEADER, "{codec:?}");
            assert!(resend_committed_in(&log, -1, "t/0/0"), "{codec:?}");
            assert!(!resend_committed_in(&log, -1, "t/0/1"), "{codec:?}");
        }
    }

    #[test]
    fn a_compressed_batch_that_lies_or_expands_too_far_is_an_error_naming_it() {
        for codec in CODECS {
            // Ten decompressed bytes cannot hold the 200 records the header claims: refused
            // before kafka-protocol allocates for them.
            let lying = batch_around(&compress(&[0; 10], codec), codec, 200).unwrap();
            let error = decode_records(&lying).unwrap_err();
            assert!(error.contains("claims 200 records in 10 bytes"), "{error}");
            assert!(error.contains(&format!("offset 0 ({codec:?})")), "{error}");
            let bomb = batch_around(&compress(&vec![0; 2 << 20], codec), codec, 1).unwrap();
            let error = decode_records_within(&bomb, 1 << 20).unwrap_err();
            assert!(
                error.contains("expand to more than 1048576 bytes"),
                "{error}"
            );
            let garbage = batch_around(b"not compressed at all", codec, 1).unwrap();
            let error = decode_records(&garbage).unwrap_err();
            assert!(
                error.contains(&format!(
                    "batch at offset 0: cannot decompress its {codec:?}"
                )),
                "{error}"
            );
        }
    }
}
