// Helpers for Kubernetes objects as plain objects (parsed JSON).

export const metadata = (o) => (o?.metadata && typeof o.metadata === 'object' ? o.metadata : {});
export const name = (o) => metadata(o).name ?? '';
export const namespace = (o) => metadata(o).namespace ?? null;
export const spec = (o) => (o?.spec && typeof o.spec === 'object' ? o.spec : {});
export const isDeleting = (o) => metadata(o).deletionTimestamp != null;

const strings = (m) =>
  m && typeof m === 'object' ? Object.fromEntries(Object.entries(m).filter(([, v]) => typeof v === 'string')) : {};
export const labels = (o) => strings(metadata(o).labels);
export const annotations = (o) => strings(metadata(o).annotations);

/** The label selector string (`a=b,c=d`) that selects these labels. */
export const selectorOf = (wanted) =>
  Object.keys(wanted)
    .sort()
    .map((k) => `${k}=${wanted[k]}`)
    .join(',');
