/**
 * Receipts (`docs/receipts.md`): a call that ends `allowed` or `approved` carries a compact JWS,
 * signed by the server's Ed25519 key, over exactly what may run. A tool checks it here, with
 * `jose`, before it runs: the signature, the expiry, the issuer, its own name and the arguments.
 */
import {
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors as joseErrors,
  jwtVerify,
} from 'jose';

import { CountersignError } from './errors.js';
import { exactJsonEqual, readExactJson } from './exact-json.js';

export const RECEIPT_TYPE = 'countersign-receipt+jwt';
/** Where the MCP gateway puts the receipt in a `tools/call` request's `params._meta`. */
export const RECEIPT_META_KEY = 'dev.countersign/receipt';

/** What a receipt vouches for (`docs/receipts.md`, "The receipt"). */
export interface ReceiptClaims extends JWTPayload {
  iss: string;
  sub: string;
  jti: string;
  iat: number;
  exp: number;
  agent: string;
  principal: string;
  run_id: string;
  tool: string;
  /** The exact JSON text the tool must run with (the approver's edit, if edited). */
  arguments: string;
  arguments_sha256: string;
  status: 'allowed' | 'approved';
  approvals: { by: string; gate: string; at: string }[];
  amounts: { rule: string; amount: string; currency: string }[];
  edited: boolean;
}

/** Why a receipt was refused; each reason has its class below. */
export type ReceiptProblem =
  | 'signature'
  | 'expired'
  | 'tool'
  | 'arguments'
  | 'unknown_key'
  | 'issuer'
  | 'replayed';

/** A receipt that does not prove the call may run as asked. Never carries the receipt's text. */
export class ReceiptInvalid extends CountersignError {
  readonly problem: ReceiptProblem;

  constructor(problem: ReceiptProblem, message: string) {
    super(message);
    this.name = new.target.name;
    this.problem = problem;
  }
}

export class ReceiptBadSignature extends ReceiptInvalid {
  constructor(message = 'the receipt is not a valid EdDSA-signed Countersign receipt') {
    super('signature', message);
  }
}

export class ReceiptExpired extends ReceiptInvalid {
  constructor() {
    super('expired', 'the receipt has expired: submit the call again');
  }
}

export class ReceiptWrongTool extends ReceiptInvalid {
  constructor() {
    super('tool', 'the receipt is for another tool');
  }
}

export class ReceiptWrongArguments extends ReceiptInvalid {
  constructor() {
    super('arguments', 'the receipt is for other arguments');
  }
}

export class ReceiptUnknownKey extends ReceiptInvalid {
  constructor() {
    super('unknown_key', "the receipt is signed by a key the issuer's JWKS does not hold");
  }
}

export class ReceiptWrongIssuer extends ReceiptInvalid {
  constructor() {
    super('issuer', 'the receipt was issued by another Countersign');
  }
}

export class ReceiptReplayed extends ReceiptInvalid {
  constructor() {
    super('replayed', 'the receipt was used already: one call runs once');
  }
}

/**
 * Remembers the receipts (`jti`) seen until they expire, and refuses a second use. In memory:
 * one process. A tool served by several processes needs a shared store with the same contract.
 */
export class ReplayGuard {
  readonly #seen = new Map<string, number>();

  /** Records `jti` until `exp` (seconds since the epoch); throws `ReceiptReplayed` if seen. */
  use(jti: string, exp: number, nowSeconds = Date.now() / 1000): void {
    for (const [seen, until] of this.#seen) {
      if (until <= nowSeconds) {
        this.#seen.delete(seen);
      }
    }
    if (this.#seen.has(jti)) {
      throw new ReceiptReplayed();
    }
    this.#seen.set(jti, exp);
  }
}

export interface VerifyReceiptOptions {
  /** The tool about to run: the receipt must name it. */
  tool: string;
  /**
   * The arguments it is about to run with: the exact JSON text (compared by SHA-256), or an
   * already parsed value (compared with the receipt's text read strictly, numbers as exact
   * decimals: `1250.00` equals `1250`, never `1250.001`).
   */
  arguments: string | unknown;
  /** The server's public URL (the `iss` claim); its `/.well-known/jwks.json` is fetched. */
  issuer?: string;
  /** The server's JWKS, for offline use; when given, nothing is fetched. */
  jwks?: JSONWebKeySet;
  /** Refuses a receipt seen before it expired. */
  replayGuard?: ReplayGuard;
  /** The current time (for tests). */
  currentDate?: Date;
}

const remoteKeySets = new Map<string, JWTVerifyGetKey>();

function keySetFor(options: VerifyReceiptOptions): JWTVerifyGetKey {
  if (options.jwks !== undefined) {
    return createLocalJWKSet(options.jwks);
  }
  if (options.issuer === undefined) {
    throw new TypeError('verifyReceipt needs `issuer` (to fetch its keys) or `jwks`');
  }
  let keySet = remoteKeySets.get(options.issuer);
  if (keySet === undefined) {
    // jose caches the fetched set and fetches it again for a key id it does not hold.
    keySet = createRemoteJWKSet(new URL('/.well-known/jwks.json', options.issuer));
    remoteKeySets.set(options.issuer, keySet);
  }
  return keySet;
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, '0')).join('');
}

function asClaims(payload: JWTPayload): ReceiptClaims {
  const text = (key: string): boolean => typeof payload[key] === 'string';
  const ok =
    ['iss', 'sub', 'jti', 'agent', 'principal', 'run_id', 'tool', 'arguments'].every(text) &&
    /^[0-9a-f]{64}$/.test(String(payload['arguments_sha256'])) &&
    (payload['status'] === 'allowed' || payload['status'] === 'approved') &&
    typeof payload.iat === 'number' &&
    typeof payload.exp === 'number' &&
    Array.isArray(payload['approvals']) &&
    Array.isArray(payload['amounts']) &&
    typeof payload['edited'] === 'boolean';
  if (!ok) {
    throw new ReceiptBadSignature('the receipt lacks a claim a Countersign receipt has');
  }
  return payload as ReceiptClaims;
}

/**
 * Verifies `receipt` for running `tool` with `arguments`; returns its claims, or throws a
 * `ReceiptInvalid` subclass naming the reason. Only `EdDSA` is accepted, whatever the header says.
 */
export async function verifyReceipt(
  receipt: string,
  options: VerifyReceiptOptions,
): Promise<ReceiptClaims> {
  let header;
  try {
    header = decodeProtectedHeader(receipt);
  } catch {
    throw new ReceiptBadSignature();
  }
  if (header.alg !== 'EdDSA' || header.typ !== RECEIPT_TYPE) {
    throw new ReceiptBadSignature();
  }
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(receipt, keySetFor(options), {
      algorithms: ['EdDSA'],
      typ: RECEIPT_TYPE,
      requiredClaims: ['iss', 'sub', 'jti', 'iat', 'exp'],
      ...(options.issuer !== undefined && { issuer: options.issuer }),
      ...(options.currentDate !== undefined && { currentDate: options.currentDate }),
    }));
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) {
      throw new ReceiptExpired();
    }
    if (error instanceof joseErrors.JWTClaimValidationFailed && error.claim === 'iss') {
      throw new ReceiptWrongIssuer();
    }
    if (error instanceof joseErrors.JWKSNoMatchingKey) {
      throw new ReceiptUnknownKey();
    }
    if (error instanceof joseErrors.JOSEError) {
      throw new ReceiptBadSignature();
    }
    throw error; // the JWKS could not be fetched, say: not the receipt's fault
  }
  const claims = asClaims(payload);
  if ((await sha256Hex(claims.arguments)) !== claims.arguments_sha256) {
    throw new ReceiptBadSignature('the receipt contradicts itself');
  }
  if (claims.tool !== options.tool) {
    throw new ReceiptWrongTool();
  }
  const given = options.arguments;
  const same =
    typeof given === 'string'
      ? (await sha256Hex(given)) === claims.arguments_sha256
      : exactJsonEqual(readExactJson(claims.arguments), given);
  if (!same) {
    throw new ReceiptWrongArguments();
  }
  options.replayGuard?.use(claims.jti, claims.exp);
  return claims;
}
