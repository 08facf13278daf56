#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::kafka_compressed_batch(data));
