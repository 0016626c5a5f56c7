/** A label selector the host would refuse, with the host's reason. */
export class SelectorError extends Error {}

/** Parses a label selector (`app=web,tier!=db`, `env in (a,b)`, `!legacy`) into a matcher of labels. */
export function parseSelector(selector: string): (labels: Record<string, string>) => boolean;
