/**
 * Receipts checked with `verifyReceipt`, signed by the tests' own signer (`signer.ts`) so each
 * forgery can be made on purpose; the server's receipts are checked in `receipts-live.test.ts`.
 */
import { SignJWT, base64url } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';

import {
  ReceiptExpired,
  ReceiptReplayed,
  ReceiptBadSignature,
  ReceiptUnknownKey,
  ReceiptWrongArguments,
  ReceiptWrongIssuer,
  ReceiptWrongTool,
  ReplayGuard,
  verifyReceipt,
} from '../src/index.js';
import { ARGUMENTS, ISSUER, type Keys, claims, makeKeys, part, sign } from './signer.js';

let keys: Keys;

beforeAll(async () => {
  keys = await makeKeys();
});

function signed(payload: ReturnType<typeof claims>): Promise<string> {
  return sign(payload, keys.signingKey, keys.kid);
}

describe('verifyReceipt', () => {
  it('returns the claims for the exact text and for the parsed arguments', async () => {
    const receipt = await signed(claims());
    const byText = await verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks });
    expect(byText.status).toBe('approved');
    expect(byText.amounts).toEqual([{ rule: 'big-payments', amount: '1250.00', currency: 'USD' }]);
    const parsed = { tags: ['a', 100], payee: { iban: 'DE89' }, amount: 1250 };
    await expect(verifyReceipt(receipt, { tool: 'pay', arguments: parsed, jwks: keys.jwks })).resolves.toEqual(
      byText,
    );
  });

  it('compares numbers as exact decimals: 1250.00 is 1250.0, never 1250.001', async () => {
    const receipt = await signed(claims());
    const other = { payee: { iban: 'DE89' }, tags: ['a', 100] };
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: { ...other, amount: 1250.0 }, jwks: keys.jwks }),
    ).resolves.toBeTruthy();
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: { ...other, amount: 1250.001 }, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: { ...other, amount: '1250.00' }, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);
  });

  it('refuses changed arguments, as text (one byte) and parsed (an extra key)', async () => {
    const receipt = await signed(claims());
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS.replace('DE89', 'DE88'), jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: `${ARGUMENTS} `, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);
    const extra = { amount: 1250, payee: { iban: 'DE89' }, tags: ['a', 100], memo: 'x' };
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: extra, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptWrongArguments);
  });

  it('refuses another tool', async () => {
    const receipt = await signed(claims());
    await expect(
      verifyReceipt(receipt, { tool: 'pay_invoice', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptWrongTool);
  });

  it('refuses an expired receipt', async () => {
    const past = Math.floor(Date.now() / 1000) - 3600;
    const receipt = await signed(claims({ iat: past - 900, exp: past }));
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptExpired);
  });

  it('refuses alg none and HS256 signed with the public key', async () => {
    const none = `${part({ alg: 'none', typ: 'countersign-receipt+jwt' })}.${part(claims())}.`;
    await expect(
      verifyReceipt(none, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptBadSignature);
    const hs256 = await new SignJWT(claims())
      .setProtectedHeader({ alg: 'HS256', typ: 'countersign-receipt+jwt', kid: keys.kid })
      .sign(base64url.decode(keys.publicX));
    await expect(
      verifyReceipt(hs256, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptBadSignature);
  });

  it('refuses a swapped payload and a receipt signed by another key', async () => {
    const genuine = (await signed(claims())).split('.');
    const swapped = [genuine[0], part(claims({ tool: 'drop_database' })), genuine[2]].join('.');
    await expect(
      verifyReceipt(swapped, { tool: 'drop_database', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptBadSignature);
    // Another key claiming the real key's id: the signature does not verify.
    const impostor = await sign(claims(), keys.otherKey, keys.kid);
    await expect(
      verifyReceipt(impostor, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptBadSignature);
    // Another key under its own id: the issuer does not publish it.
    const unknown = await sign(claims(), keys.otherKey, keys.otherKid);
    await expect(
      verifyReceipt(unknown, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptUnknownKey);
  });

  it('refuses another issuer when one is expected', async () => {
    const receipt = await signed(claims({ iss: 'https://elsewhere.example' }));
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks, issuer: ISSUER }),
    ).rejects.toBeInstanceOf(ReceiptWrongIssuer);
  });

  it('refuses a receipt whose digest contradicts its own arguments', async () => {
    const receipt = await signed(claims({ arguments_sha256: 'a'.repeat(64) }));
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks }),
    ).rejects.toBeInstanceOf(ReceiptBadSignature);
  });

  it('refuses a second use through a replay guard', async () => {
    const receipt = await signed(claims());
    const replayGuard = new ReplayGuard();
    await verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks, replayGuard });
    await expect(
      verifyReceipt(receipt, { tool: 'pay', arguments: ARGUMENTS, jwks: keys.jwks, replayGuard }),
    ).rejects.toBeInstanceOf(ReceiptReplayed);
  });
});
