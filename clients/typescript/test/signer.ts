/**
 * An independent signer for tests: jose's own `SignJWT` with Ed25519 keys made here, so that
 * receipts (and each forgery) can be made on purpose, apart from the server's signing code.
 */
import { createHash } from 'node:crypto';

import {
  type JSONWebKeySet,
  type JWTPayload,
  SignJWT,
  base64url,
  calculateJwkThumbprint,
  exportJWK,
  generateKeyPair,
} from 'jose';

export const ISSUER = 'https://countersign.example';
export const ARGUMENTS = '{"amount": 1250.00, "payee": {"iban": "DE89"}, "tags": ["a", 1e2]}';

type Key = Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];
export interface Keys {
  signingKey: Key;
  otherKey: Key;
  kid: string;
  otherKid: string;
  jwks: JSONWebKeySet;
  publicX: string;
}

/** A receipt's claims for `pay` with `ARGUMENTS`; the digest follows `overrides.arguments`. */
export function claims(overrides: JWTPayload = {}): JWTPayload {
  const text = typeof overrides['arguments'] === 'string' ? overrides['arguments'] : ARGUMENTS;
  const now = Math.floor(Date.now() / 1000);
  return {
    iss: ISSUER,
    sub: '0d4f7c8e-1111-4222-8333-444455556666',
    jti: '0d4f7c8e-1111-4222-8333-444455556666',
    iat: now,
    exp: now + 900,
    agent: 'billing-bot',
    principal: 'alice@example.com',
    run_id: 'run-1',
    tool: 'pay',
    arguments: ARGUMENTS,
    arguments_sha256: createHash('sha256').update(text).digest('hex'),
    status: 'approved',
    approvals: [{ by: 'carol', gate: 'finance', at: '2026-12-07T10:00:00+00:00' }],
    amounts: [{ rule: 'big-payments', amount: '1250.00', currency: 'USD' }],
    edited: false,
    ...overrides,
  };
}

export async function sign(payload: JWTPayload, key: Key, keyId: string): Promise<string> {
  return new SignJWT(payload)
    .setProtectedHeader({ alg: 'EdDSA', typ: 'countersign-receipt+jwt', kid: keyId })
    .sign(key);
}

export function part(value: object): string {
  return base64url.encode(JSON.stringify(value));
}

/** A signing key, another key, and the JWKS that publishes only the first. */
export async function makeKeys(): Promise<Keys> {
  const { privateKey: signingKey } = await generateKeyPair('EdDSA', { extractable: true });
  const { privateKey: otherKey } = await generateKeyPair('EdDSA', { extractable: true });
  const publicJwk = await exportJWK(signingKey);
  delete publicJwk.d;
  const otherJwk = await exportJWK(otherKey);
  delete otherJwk.d;
  const kid = await calculateJwkThumbprint(publicJwk);
  const otherKid = await calculateJwkThumbprint(otherJwk);
  const jwks = { keys: [{ ...publicJwk, kid, use: 'sig', alg: 'EdDSA' }] };
  return { signingKey, otherKey, kid, otherKid, jwks, publicX: publicJwk.x ?? '' };
}
