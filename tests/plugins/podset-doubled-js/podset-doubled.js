// A candidate version of plugins/podset-js that decides wrong on purpose:
// it asks for twice the PodSet's `spec.size`. The tests of
// `reconciler-host plan` and `test --against` show what it would change
// before it is let near a cluster.

import { plugin } from '../../../sdk-js/src/index.js';
import { METADATA, reconcile } from '../../../plugins/podset-js/podset.js';

function doubled(podset, ctx) {
  const size = podset.spec?.size;
  const spec = typeof size === 'number' ? { ...podset.spec, size: size * 2 } : podset.spec;
  return reconcile({ ...podset, spec }, ctx);
}

export default plugin(METADATA, doubled);
