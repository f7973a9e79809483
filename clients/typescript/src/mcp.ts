/**
 * For MCP servers written in TypeScript: a tool handler that runs only with a valid receipt.
 * The Countersign MCP gateway passes each allowed or approved call's receipt in the
 * `tools/call` request's `params._meta["dev.countersign/receipt"]` (`docs/receipts.md`).
 */
import {
  RECEIPT_META_KEY,
  ReceiptInvalid,
  type ReplayGuard,
  verifyReceipt,
} from './receipts.js';
import type { JSONWebKeySet } from 'jose';

/** What the MCP SDK hands a tool handler besides its arguments; only `_meta` is read. */
export interface ToolCallExtra {
  _meta?: Record<string, unknown>;
}

/** The tool result a refused call gets: an error the model reads, the tool not run. */
export interface RefusedToolResult {
  [key: string]: unknown;
  isError: true;
  content: { type: 'text'; text: string }[];
}

export interface RequireReceiptOptions {
  /** The tool's name as the gateway submits it (the receipt's `tool`). */
  tool: string;
  /** Countersign's public URL; default `COUNTERSIGN_URL` from the environment. */
  issuer?: string;
  /** Countersign's JWKS, for a server that must not fetch it. */
  jwks?: JSONWebKeySet;
  /** Refuses a receipt used before (one call runs once). */
  replayGuard?: ReplayGuard;
}

function refused(message: string): RefusedToolResult {
  return { isError: true, content: [{ type: 'text', text: `Not run: ${message}.` }] };
}

/**
 * Wraps an MCP tool handler (`server.registerTool(name, config, requireReceipt(handler, {
 * tool: name }))`): the handler runs only when the request carries a receipt that verifies
 * for this tool and these arguments; otherwise the call gets an error result naming why.
 */
export function requireReceipt<A, E extends ToolCallExtra, R>(
  handler: (args: A, extra: E) => R | Promise<R>,
  options: RequireReceiptOptions,
): (args: A, extra: E) => Promise<R | RefusedToolResult> {
  const issuer =
    options.issuer ?? (typeof process === 'undefined' ? undefined : process.env['COUNTERSIGN_URL']);
  if (issuer === undefined && options.jwks === undefined) {
    throw new TypeError('requireReceipt needs `issuer` (or COUNTERSIGN_URL) or `jwks`');
  }
  return async (args: A, extra: E): Promise<R | RefusedToolResult> => {
    const receipt = extra._meta?.[RECEIPT_META_KEY];
    if (typeof receipt !== 'string' || receipt === '') {
      return refused('this tool runs only with a Countersign receipt, and the call has none');
    }
    try {
      await verifyReceipt(receipt, {
        tool: options.tool,
        arguments: args ?? {},
        ...(issuer !== undefined && { issuer }),
        ...(options.jwks !== undefined && { jwks: options.jwks }),
        ...(options.replayGuard !== undefined && { replayGuard: options.replayGuard }),
      });
    } catch (error) {
      if (error instanceof ReceiptInvalid) {
        return refused(error.message);
      }
      throw error;
    }
    return handler(args, extra);
  };
}
