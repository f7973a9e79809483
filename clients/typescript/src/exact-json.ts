/**
 * Strict JSON with numbers kept as their exact decimal text, for comparing a receipt's
 * arguments with parsed ones (`JSON.parse` would round `1250.001` and `1250.0010000000001`
 * alike). Strict as the server reads arguments: no duplicate keys, nothing after the value.
 */

/** A JSON number as written. */
export class ExactNumber {
  constructor(readonly text: string) {}
}

export type ExactJson = null | boolean | string | ExactNumber | ExactJson[] | { [key: string]: ExactJson };

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const WHITESPACE = /[ \t\n\r]*/y;

/** Reads `text` as strict JSON; throws `SyntaxError` where it is not. */
export function readExactJson(text: string): ExactJson {
  let at = 0;
  const fail = (): never => {
    throw new SyntaxError(`not strict JSON at character ${at}`);
  };
  const skip = (): void => {
    WHITESPACE.lastIndex = at;
    WHITESPACE.exec(text);
    at = WHITESPACE.lastIndex;
  };
  const literal = (word: string, value: ExactJson): ExactJson => {
    if (!text.startsWith(word, at)) {
      fail();
    }
    at += word.length;
    return value;
  };
  const string = (): string => {
    // JSON.parse reads the string token itself: its escapes are JSON's.
    let end = at + 1;
    while (end < text.length && text[end] !== '"') {
      end += text[end] === '\\' ? 2 : 1;
    }
    if (end >= text.length) {
      fail();
    }
    const value: unknown = JSON.parse(text.slice(at, end + 1));
    at = end + 1;
    return value as string;
  };
  const value = (): ExactJson => {
    skip();
    const next = text[at];
    if (next === '{') {
      at += 1;
      const object: { [key: string]: ExactJson } = Object.create(null);
      skip();
      if (text[at] === '}') {
        at += 1;
        return object;
      }
      for (;;) {
        skip();
        if (text[at] !== '"') {
          fail();
        }
        const key = string();
        if (Object.hasOwn(object, key)) {
          fail();
        }
        skip();
        if (text[at] !== ':') {
          fail();
        }
        at += 1;
        object[key] = value();
        skip();
        if (text[at] === ',') {
          at += 1;
        } else if (text[at] === '}') {
          at += 1;
          return object;
        } else {
          fail();
        }
      }
    }
    if (next === '[') {
      at += 1;
      const array: ExactJson[] = [];
      skip();
      if (text[at] === ']') {
        at += 1;
        return array;
      }
      for (;;) {
        array.push(value());
        skip();
        if (text[at] === ',') {
          at += 1;
        } else if (text[at] === ']') {
          at += 1;
          return array;
        } else {
          fail();
        }
      }
    }
    if (next === '"') {
      return string();
    }
    if (next === 't') {
      return literal('true', true);
    }
    if (next === 'f') {
      return literal('false', false);
    }
    if (next === 'n') {
      return literal('null', null);
    }
    NUMBER.lastIndex = at;
    const number = NUMBER.exec(text);
    if (number === null) {
      return fail();
    }
    at = NUMBER.lastIndex;
    return new ExactNumber(number[0]);
  };
  const read = value();
  skip();
  if (at !== text.length) {
    fail();
  }
  return read;
}

/** A decimal as (negative, digits without leading or trailing zeros, exponent); zero is ''. */
function decimal(text: string): [boolean, string, number] | null {
  const match = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(text);
  if (match === null) {
    return null;
  }
  const [, sign = '', whole = '', fraction = '', exponent = '0'] = match;
  let digits = (whole + fraction).replace(/^0+/, '');
  let power = Number(exponent) - fraction.length;
  const trailing = /0*$/.exec(digits)?.[0].length ?? 0;
  digits = digits.slice(0, digits.length - trailing);
  power += trailing;
  if (digits === '') {
    return [false, '', 0];
  }
  return [sign === '-', digits, power];
}

function sameNumber(exact: ExactNumber, given: unknown): boolean {
  let text: string;
  if (typeof given === 'number') {
    if (!Number.isFinite(given)) {
      return false;
    }
    text = String(given);
  } else if (typeof given === 'bigint') {
    text = given.toString();
  } else {
    return false;
  }
  const left = decimal(exact.text);
  const right = decimal(text);
  return left !== null && right !== null && left.join(' ') === right.join(' ');
}

/** Whether `given` (a parsed JSON value) equals `exact`, numbers compared as exact decimals. */
export function exactJsonEqual(exact: ExactJson, given: unknown): boolean {
  if (exact instanceof ExactNumber) {
    return sameNumber(exact, given);
  }
  if (exact === null || typeof exact !== 'object') {
    return exact === given;
  }
  if (Array.isArray(exact)) {
    return (
      Array.isArray(given) &&
      given.length === exact.length &&
      exact.every((item, index) => exactJsonEqual(item, given[index]))
    );
  }
  if (given === null || typeof given !== 'object' || Array.isArray(given)) {
    return false;
  }
  const keys = Object.keys(exact);
  const givenKeys = Object.keys(given);
  return (
    keys.length === givenKeys.length &&
    keys.every(
      (key) =>
        Object.hasOwn(given, key) &&
        exactJsonEqual(exact[key] as ExactJson, (given as Record<string, unknown>)[key]),
    )
  );
}
