//! Cluster backends: the narrow interface the engine drives, and its
//! implementations (the embedded in-memory cluster; the Kubernetes API).

pub mod backend;
pub mod clock;
pub mod embedded;
pub mod kubernetes;

pub use backend::{
    BackendError, ClusterBackend, EventRecord, EventRef, EventSeries, KindScope, LabelAt,
    ListedObject, ObjectKey, Propagation, WatchEvent, WatchEventType, WatchScope, WatchStream,
};
pub use clock::{Clock, RealClock, VirtualClock};
