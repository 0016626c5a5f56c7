import type { PluginMetadata } from './contract.js';
import type { Response } from './response.js';

export const DEFAULT_MAX_EVENTS: number;
export const DEFAULT_MAX_APPLIES: number;
export const DEFAULT_MAX_DELETES: number;

/** Throws `ReconcileError` with the host's message for the first rule `response` breaks. */
export function checkResponse(metadata: PluginMetadata, primaryNamespace: string | null, response: Response): void;
