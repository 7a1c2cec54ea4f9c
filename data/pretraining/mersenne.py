"""Python's `random.Random` (MT19937) as numba-compiled functions, draw for draw.

The generator's algorithm makes millions of small random draws; as Python
calls they dominate its run time. These functions reproduce CPython's
`random()`, `getrandbits(k <= 32)`, `_randbelow`, `randint` and `shuffle`
exactly, on a state array taken from, and given back to, a `random.Random`.
The state is uint32 [625]: the 624 Mersenne Twister words and the position.
"""

import numba
import numpy as np

_N, _M = 624, 397


def state_from(rng):
  """The state array of a random.Random (version-3 state), to draw from."""
  version, internal, _ = rng.getstate()
  if version != 3:
    raise ValueError(f"Unsupported random.Random state version {version}.")
  return np.array(internal, dtype=np.uint32)


def restore(rng, state):
  """Puts a state array back into the random.Random it came from."""
  rng.setstate((3, tuple(int(x) for x in state), None))


@numba.njit(cache=True)
def _twist(mt):
  upper, lower, matrix = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
  for kk in range(_N):
    y = (mt[kk] & upper) | (mt[kk + 1 if kk + 1 < _N else 0] & lower)
    value = mt[kk + _M if kk + _M < _N else kk + _M - _N] ^ (y >> np.uint32(1))
    mt[kk] = value ^ matrix if y & np.uint32(1) else value


@numba.njit(cache=True)
def genrand(state):
  """The next 32-bit output (CPython's genrand_uint32)."""
  if state[_N] >= _N:
    _twist(state)
    state[_N] = 0
  y = state[state[_N]]
  state[_N] += 1
  y ^= y >> np.uint32(11)
  y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
  y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
  y ^= y >> np.uint32(18)
  return y


@numba.njit(cache=True)
def random(state):
  """random.random(): a float in [0, 1) from two outputs."""
  a = genrand(state) >> np.uint32(5)
  b = genrand(state) >> np.uint32(6)
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True)
def _bit_length(n):
  k = 0
  for step in (16, 8, 4, 2, 1):
    if n >> (k + step):
      k += step
  return k + 1 if n else 0


@numba.njit(cache=True)
def randbelow(state, n):
  """random.Random._randbelow(n) for 0 < n < 2**32: rejection on n.bit_length() bits."""
  shift = np.uint32(32 - _bit_length(n))
  r = np.int64(genrand(state) >> shift)
  while r >= n:
    r = np.int64(genrand(state) >> shift)
  return r


@numba.njit(cache=True)
def randint(state, a, b):
  """random.randint(a, b): a + _randbelow(b - a + 1)."""
  return a + randbelow(state, b - a + 1)


@numba.njit(cache=True)
def shuffle(state, x):
  """random.shuffle(x) in place (Fisher-Yates from the end)."""
  for i in range(len(x) - 1, 0, -1):
    j = randbelow(state, i + 1)
    x[i], x[j] = x[j], x[i]
