// A candidate version of plugins/podset-js that decides wrong on purpose:
// it asks for twice the PodSet's `spec.size`, and fails outright on a
// PodSet labelled `tests.example.com/candidate-fails`. The tests of
// `reconciler-host plan`, `test --against` and shadow show what it would
// change, and what a failing candidate counts as, before it is let near a
// cluster.

import { plugin } from '../../../sdk-js/src/index.js';
import { METADATA, reconcile } from '../../../plugins/podset-js/podset.js';

function doubled(podset, ctx) {
  if (podset.metadata?.labels?.['tests.example.com/candidate-fails'] !== undefined) {
    throw new Error('this candidate fails on PodSets labelled tests.example.com/candidate-fails');
  }
  const size = podset.spec?.size;
  const spec = typeof size === 'number' ? { ...podset.spec, size: size * 2 } : podset.spec;
  return reconcile({ ...podset, spec }, ctx);
}

export default plugin(METADATA, doubled);
