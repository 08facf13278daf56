//! The keyed state backend conformance suite against RocksDB: every state test of the heap
//! backend, with incremental checkpoints and with full (canonical) ones.

use std::sync::Arc;

use weir::state::backend_factory::StateBackendConfig;
use weir::state::conformance::StoreKind;
use weir_rocksdb::{RocksDbStateBackend, RocksDbStateBackendFactory};

fn rocksdb(incremental: bool) -> StoreKind {
    let config: StateBackendConfig = RocksDbStateBackend::new()
        .with_incremental_checkpoints(incremental)
        .with_memory_budget(16 << 20)
        .with_background_threads(1)
        .into();
    StoreKind::Backend(Arc::new(RocksDbStateBackendFactory), config)
}

mod incremental {
    weir::keyed_state_backend_conformance!(super::rocksdb(true));
}

mod full {
    weir::keyed_state_backend_conformance!(super::rocksdb(false));
}
