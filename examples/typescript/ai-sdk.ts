/**
 * A Vercel AI SDK agent whose payment tool is gated by Countersign.
 *
 * `gateTools` wraps the tools: each call the model makes is submitted to Countersign, and the
 * real `execute` runs only when it is allowed or a person approves it; otherwise the model
 * receives `{ not_approved: true, status, reason }` and carries on. The model here is the AI
 * SDK's own mock (`ai/test`), so no API key or network is needed: it asks for one payment
 * over the cap, which a person approves (or denies) in the approver's queue.
 *
 *     COUNTERSIGN_URL=http://127.0.0.1:8000 COUNTERSIGN_TOKEN=cs_… node ai-sdk.ts
 */
import { generateText, isStepCount, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { Client } from 'countersign-client';
import { gateTools } from 'countersign-client/ai';
import { z } from 'zod';

const pay = tool({
  description: 'Pay an amount to a payee.',
  inputSchema: z.object({ amount: z.string(), currency: z.string(), payee: z.string() }),
  execute: async ({ amount, currency, payee }) => `paid ${currency} ${amount} to ${payee}`,
});

const PAYMENT = { amount: '1250.00', currency: 'USD', payee: 'bob' };
const USAGE = {
  inputTokens: { total: 20, noCache: 20, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};
// Stands in for a real model: one payment, then a summary.
const model = new MockLanguageModelV4({
  doGenerate: [
    {
      content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'pay', input: JSON.stringify(PAYMENT) }],
      finishReason: { unified: 'tool-calls', raw: undefined },
      usage: USAGE,
      warnings: [],
    },
    {
      content: [{ type: 'text', text: 'Invoice INV-0042 is dealt with.' }],
      finishReason: { unified: 'stop', raw: undefined },
      usage: USAGE,
      warnings: [],
    },
  ],
});

const client = new Client(); // COUNTERSIGN_URL and COUNTERSIGN_TOKEN from the environment
const result = await generateText({
  model,
  prompt: 'Pay invoice INV-0042: USD 1250.00 to bob.',
  // deadlineMs: then the call is cancelled, so nobody approves a payment that never ran.
  tools: gateTools(client, { pay }, { runId: `invoice-0042-${Date.now()}`, deadlineMs: 120_000 }),
  stopWhen: isStepCount(3),
});
for (const step of result.steps) {
  for (const part of step.content) {
    if (part.type === 'tool-result') {
      console.log('done:', part.output); // the tool's result, or why it did not run
    }
  }
}
console.log(result.text);
