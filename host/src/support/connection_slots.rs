//! The connections of a TLS endpoint (admission, metrics), and who gives
//! way when they run out.
//!
//! Any pod can open connections to the webhook port, and a client that
//! opens many and then sends its request slowly (or never) would hold
//! every slot while the API server's calls wait in the listen backlog until
//! they time out: a Fail policy then denies every write of the kind, an
//! Ignore policy admits it unchecked. So a slot is never held against a
//! newcomer by a connection that is only being read from: when all slots
//! are taken, a new connection closes the oldest connection that is not in
//! a plugin call (reading a request, or idle between requests), and waits
//! only if every slot is in a call, which a plugin's deadline bounds. A
//! client that sends its request promptly, as the API server does, is
//! served however many slow ones there are.
//!
//! Caveat: a flood of new connections shortens how long any one connection
//! may take to send its request to about the time the flood takes to open
//! `max` connections; the TLS handshakes that flood costs bound its rate.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot};

/// The slots of one server.
pub struct ConnectionSlots {
    max: usize,
    open: Mutex<Open>,
    freed: Notify,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    /// By id, so the first entry is the oldest connection.
    slots: BTreeMap<u64, Slot>,
}

struct Slot {
    /// In a plugin call: never closed to make room.
    in_call: bool,
    /// Closes the connection when sent (or dropped).
    close: Option<oneshot::Sender<()>>,
}

/// A connection's slot: freed when dropped.
pub struct SlotHandle {
    id: u64,
    slots: Arc<ConnectionSlots>,
}

/// Marks its connection as in a call while held.
pub struct InCall {
    id: u64,
    slots: Arc<ConnectionSlots>,
}

impl ConnectionSlots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            open: Mutex::default(),
            freed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A slot for a new connection, and the signal that closes it. With
    /// every slot taken, the oldest connection not in a call is closed for
    /// it; if all are in calls, this waits until one ends.
    pub async fn take(self: &Arc<Self>) -> (SlotHandle, oneshot::Receiver<()>) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a slot freed in between wakes us.
            freed.as_mut().enable();
            {
                let mut open = self.lock();
                if open.slots.len() >= self.max {
                    let oldest_idle = open
                        .slots
                        .iter_mut()
                        .find(|(_, slot)| !slot.in_call && slot.close.is_some())
                        .map(|(id, slot)| (*id, slot.close.take()));
                    if let Some((id, Some(close))) = oldest_idle {
                        // The connection's task sees this, ends and frees
                        // its slot; the slot is given up at once so that
                        // the newcomer does not wait for that task.
                        let _ = close.send(());
                        open.slots.remove(&id);
                        tracing::debug!(
                            connection = id,
                            "closed the oldest connection not in a call to make room"
                        );
                    }
                }
                if open.slots.len() < self.max {
                    let id = open.next_id;
                    open.next_id += 1;
                    let (close, closed) = oneshot::channel();
                    open.slots.insert(
                        id,
                        Slot {
                            in_call: false,
                            close: Some(close),
                        },
                    );
                    return (
                        SlotHandle {
                            id,
                            slots: self.clone(),
                        },
                        closed,
                    );
                }
            }
            freed.await;
        }
    }
}

impl SlotHandle {
    /// Marks the connection as in a plugin call until the guard drops.
    pub fn in_call(&self) -> InCall {
        if let Some(slot) = self.slots.lock().slots.get_mut(&self.id) {
            slot.in_call = true;
        }
        InCall {
            id: self.id,
            slots: self.slots.clone(),
        }
    }
}

impl Drop for SlotHandle {
    fn drop(&mut self) {
        self.slots.lock().slots.remove(&self.id);
        self.slots.freed.notify_waiters();
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        if let Some(slot) = self.slots.lock().slots.get_mut(&self.id) {
            slot.in_call = false;
        }
        self.slots.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_newcomer_closes_the_oldest_connection_not_in_a_call() {
        let slots = ConnectionSlots::new(3);
        let (first, mut first_closed) = slots.take().await;
        let (second, mut second_closed) = slots.take().await;
        let (_third, mut third_closed) = slots.take().await;
        let call = first.in_call();

        let (_fourth, _) = slots.take().await;
        assert!(
            first_closed.try_recv().is_err(),
            "a connection in a call is never closed"
        );
        assert!(
            second_closed.try_recv().is_ok(),
            "the oldest one not in a call is"
        );
        assert!(third_closed.try_recv().is_err());
        assert_eq!(slots.len(), 3);
        drop(second);
        assert_eq!(slots.len(), 3, "its slot was already given away");
        drop(call);
    }

    #[tokio::test]
    async fn with_every_connection_in_a_call_a_newcomer_waits_for_one_to_end() {
        let slots = ConnectionSlots::new(2);
        let (a, _a_closed) = slots.take().await;
        let (b, _b_closed) = slots.take().await;
        let a_call = a.in_call();
        let _b_call = b.in_call();
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a_call);
        // Out of its call, `a` is the one closed for the newcomer.
        let (newcomer, _closed) = waiting.await.unwrap();
        assert_eq!(newcomer.id, 2);
        assert_eq!(slots.len(), 2, "b in its call, and the newcomer");
    }
}
