/**
 * The TypeScript client of Countersign: submit an agent's tool call, wait for the decision, and
 * run the tool only when it is allowed or approved. It speaks only HTTP and WebSockets.
 */
export { Client, type ClientOptions, type GatedOptions, type WaitOptions } from './client.js';
export {
  BadRequest,
  Conflict,
  CountersignError,
  Forbidden,
  NotApproved,
  NotFound,
  RateLimited,
  TimedOut,
  TooLarge,
  Unauthenticated,
  Unavailable,
} from './errors.js';
export {
  type CallState,
  type CallStatus,
  type Decision,
  FINAL_STATUSES,
  GO_STATUSES,
  type Reason,
  type SubmitCall,
  type Usage,
  editedArguments,
  isFinal,
  isGo,
} from './protocol.js';
export type { SocketLike, WebSocketConstructor } from './waiting.js';
export {
  RECEIPT_META_KEY,
  RECEIPT_TYPE,
  type ReceiptClaims,
  ReceiptExpired,
  ReceiptInvalid,
  type ReceiptProblem,
  ReceiptReplayed,
  ReceiptBadSignature,
  ReceiptUnknownKey,
  ReceiptWrongArguments,
  ReceiptWrongIssuer,
  ReceiptWrongTool,
  ReplayGuard,
  type VerifyReceiptOptions,
  verifyReceipt,
} from './receipts.js';
