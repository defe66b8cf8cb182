"""Procedural image-editing dataset for CacheEdit: coloured shapes on textured backgrounds.

Every example is ``(source, instruction, target, mask)``: ``source`` and ``target`` are float32
images in ``[-1, 1]`` of shape (3, S, S) (S = 32 pixels by default), ``instruction`` is 4 integer
tokens ``(op, colour, arg_a, arg_b)`` and ``mask`` the boolean (S, S) map of pixels the edit changes.
Operations: ``keep`` (identity, used as the reference pass), ``recolor``, ``move``, ``add``,
``remove``, ``resize``. Objects are named by their colour (unique within an image), so an
instruction such as "move the red object left" is ``(move, red, left, 0)``.
Generation is pure numpy and deterministic given the seed.

Textured mode (``texture=True``, the v2 attempt, not shipped): every object carries a random texture
(flat, stripes, checker or dots; random period, orientation, phase and amplitude around the
object's palette colour) that the instruction does not specify; recolour / add / resize draw a
fresh one, so the target inside the edit is a sample, not a function of (source, instruction), and
the rectified flow there is curved (move and remove stay deterministic). Correctness of such edits
is judged on low-passed images (see ``edit_correct(..., smooth=...)``).

Shaded mode (``shade=True``, the shipped v3 model): objects are flat, but every object has a brightness
``shade`` (one of SHADES, times its palette colour) that the instruction does not name; recolour and
add draw a fresh one (move, resize and remove keep it). The target of those edits is then one of
len(SHADES) images, a discrete choice the sampler must make (as a real editor picks unspecified
content), so the rectified flow bends inside the edit region while the hue, shape and place stay
specified. Correctness of such edits is judged on chromaticity (``edit_correct(..., chroma=True)``),
which a brightness factor does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

IMAGE = 32
OPS = ("keep", "recolor", "move", "add", "remove", "resize")
PALETTE = np.array(
    [[0.95, 0.15, 0.15], [0.15, 0.85, 0.2], [0.2, 0.35, 0.95], [0.95, 0.9, 0.15], [0.9, 0.2, 0.9], [0.15, 0.9, 0.9]],
    dtype=np.float32,
)  # red green blue yellow magenta cyan, in [0, 1]
COLOUR_NAMES = ("red", "green", "blue", "yellow", "magenta", "cyan")
SHAPES = ("square", "circle", "triangle")
DIRS = ((0, -1), (0, 1), (-1, 0), (1, 0))  # (dy, dx): left right up down
DIR_NAMES = ("left", "right", "up", "down")
MOVE_PX = 6
SIZES = (3, 4, 5)  # object half-extent in pixels
GRID = 4  # add: positions on a GRID x GRID lattice of cell centres
VOCAB = (len(OPS), len(PALETTE), 8, GRID * GRID)  # sizes of the 4 instruction fields
TEXTURES = ("flat", "stripes", "checker", "dots")
SHADES = (0.5, 0.7, 0.85, 1.0)  # shaded mode: brightness factors of an object's palette colour
# training op mix of the v2 and v3 models: move and add (the weak edits of v1) drawn more often
TRAIN_OP_WEIGHTS = (0.0, 0.15, 0.3, 0.25, 0.1, 0.2)  # keep recolor move add remove resize


@dataclass
class Obj:
    shape: int
    colour: int
    cy: int
    cx: int
    r: int
    tex: tuple[float, ...] | None = None  # (kind, period px, angle rad, phase a, phase b, amplitude); None: flat
    shade: float = 1.0  # brightness factor of the palette colour (shaded mode)

    def footprint(self, size: int = IMAGE) -> np.ndarray:
        yy, xx = np.mgrid[0:size, 0:size]
        dy, dx = yy - self.cy, xx - self.cx
        if self.shape == 0:
            return (np.abs(dy) <= self.r) & (np.abs(dx) <= self.r)
        if self.shape == 1:
            return dy * dy + dx * dx <= self.r * self.r + self.r
        return (dy >= -self.r) & (dy <= self.r) & (np.abs(dx) * 2 <= (dy + self.r) + 1)

    def bbox(self) -> tuple[int, int, int, int]:
        return self.cy - self.r, self.cy + self.r, self.cx - self.r, self.cx + self.r


@dataclass
class Scene:
    background: np.ndarray  # (3, S, S) in [0, 1]
    objects: list[Obj] = field(default_factory=list)

    def render(self) -> np.ndarray:
        img = self.background.copy()
        size = img.shape[-1]
        for o in self.objects:
            m = o.footprint(size)
            col = PALETTE[o.colour] * np.float32(o.shade)
            if o.tex is None or int(o.tex[0]) == 0:
                img[:, m] = col[:, None]
            else:
                pat = _pattern(o.tex, o.cy, o.cx, size)[m]
                img[:, m] = np.clip(col[:, None] + o.tex[5] * pat[None], 0, 1)
        return img


def _random_tex(rng: np.random.Generator) -> tuple[float, ...]:
    """A random texture: kind, period (pixels), angle (rad), two phases (rad), amplitude ([0, 1] units)."""
    kind = int(rng.integers(len(TEXTURES)))
    return (float(kind), float(rng.uniform(2.2, 4.0)), float(rng.uniform(0, np.pi)), float(rng.uniform(0, 2 * np.pi)),
            float(rng.uniform(0, 2 * np.pi)), float(rng.uniform(0.1, 0.2)))


def _pattern(tex: tuple[float, ...], cy: int, cx: int, size: int) -> np.ndarray:
    """(S, S) zero-mean-ish pattern in [-1, 1] in coordinates relative to the object centre (moves with it)."""
    kind, period, ang, pa, pb, _ = tex
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    yy, xx = yy - cy, xx - cx
    w = 2 * np.pi / period
    if int(kind) == 1:  # stripes
        return np.sin(w * (np.cos(ang) * xx + np.sin(ang) * yy) + pa).astype(np.float32)
    if int(kind) == 2:  # checker, cells of 1 or 2 pixels
        cell = 1 + int(period > 3.1)
        return (np.where(((np.floor(xx / cell) + np.floor(yy / cell) + int(pa > np.pi)) % 2) == 0, 1.0, -1.0)).astype(np.float32)
    dots = (np.cos(w * xx + pa) * np.cos(w * yy + pb) > 0.5).astype(np.float32)  # dots
    return (2.0 * (dots - 0.2)).astype(np.float32)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    base = rng.uniform(0.25, 0.55, size=3).astype(np.float32)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    ang = rng.uniform(0, np.pi)
    freq = rng.uniform(0.3, 0.8)
    phase = rng.uniform(0, 2 * np.pi)
    wave = np.sin(freq * (np.cos(ang) * xx + np.sin(ang) * yy) + phase)
    amp = rng.uniform(0.04, 0.1)
    tint = rng.uniform(0.5, 1.0, size=3).astype(np.float32)
    return np.clip(base[:, None, None] + amp * tint[:, None, None] * wave[None], 0, 1).astype(np.float32)


def _fits(o: Obj, others: list[Obj], size: int, margin: int = 2) -> bool:
    y0, y1, x0, x1 = o.bbox()
    if y0 < 1 or x0 < 1 or y1 > size - 2 or x1 > size - 2:
        return False
    for p in others:
        a0, a1, b0, b1 = p.bbox()
        if not (y1 + margin < a0 or a1 + margin < y0 or x1 + margin < b0 or b1 + margin < x0):
            return False
    return True


def _random_obj(rng: np.random.Generator, colour: int, others: list[Obj], size: int) -> Obj | None:
    for _ in range(40):
        r = int(rng.choice(SIZES))
        cy, cx = int(rng.integers(r + 1, size - r - 2)), int(rng.integers(r + 1, size - r - 2))
        o = Obj(int(rng.integers(len(SHAPES))), colour, cy, cx, r)
        if _fits(o, others, size):
            return o
    return None


def random_scene(rng: np.random.Generator, size: int = IMAGE, n_objects: tuple[int, int] = (2, 3),
                 texture: bool = False, shade: bool = False) -> Scene:
    """A textured background with ``n_objects`` (inclusive range) shapes of distinct colours
    (``texture``: textured objects; ``shade``: each object gets a random brightness from SHADES)."""
    bg = _background(rng, size)
    n = int(rng.integers(n_objects[0], n_objects[1] + 1))
    colours = rng.permutation(len(PALETTE))[:n]
    objs: list[Obj] = []
    for c in colours:
        o = _random_obj(rng, int(c), objs, size)
        if o is not None:
            if texture:
                o.tex = _random_tex(rng)
            if shade:
                o.shade = float(rng.choice(SHADES))
            objs.append(o)
    return Scene(bg, objs)


def _cell_centre(cell: int, size: int) -> tuple[int, int]:
    step = size // GRID
    return (cell // GRID) * step + step // 2, (cell % GRID) * step + step // 2


def apply_edit(scene: Scene, instr: tuple[int, int, int, int], size: int = IMAGE,
               rng: np.random.Generator | None = None, mode: str = "texture") -> Scene | None:
    """The scene after ``instr``; None when the edit is impossible (no such object, no room).

    With ``rng`` the unspecified content is drawn: ``mode='texture'``: a recoloured, added or resized
    object gets a fresh random texture; ``mode='shade'``: a recoloured or added object a fresh shade.
    """
    if mode not in ("texture", "shade"):
        raise ValueError(f"stochastic edit mode must be 'texture' or 'shade', got {mode!r}")
    tex_rng = rng if mode == "texture" else None
    shade_rng = rng if mode == "shade" else None
    op, colour, a, b = instr
    objs = [replace(o) for o in scene.objects]
    idx = next((i for i, o in enumerate(objs) if o.colour == colour), None)
    name = OPS[op]
    if name == "keep":
        return Scene(scene.background, objs)
    if name == "add":
        if idx is not None:
            return None
        cy, cx = _cell_centre(b, size)
        o = Obj(a % len(SHAPES), colour, cy, cx, 4)
        if not _fits(o, objs, size):
            return None
        if tex_rng is not None:
            o.tex = _random_tex(tex_rng)
        if shade_rng is not None:
            o.shade = float(shade_rng.choice(SHADES))
        return Scene(scene.background, objs + [o])
    if idx is None:
        return None
    o = objs[idx]
    rest = objs[:idx] + objs[idx + 1:]
    if name == "recolor":
        if a == colour or a >= len(PALETTE) or any(p.colour == a for p in objs):
            return None
        o.colour = a
        if tex_rng is not None:
            o.tex = _random_tex(tex_rng)
        if shade_rng is not None:
            o.shade = float(shade_rng.choice(SHADES))
    elif name == "move":
        dy, dx = DIRS[a % 4]
        o = replace(o, cy=o.cy + dy * MOVE_PX, cx=o.cx + dx * MOVE_PX)
        if not _fits(o, rest, size):
            return None
    elif name == "remove":
        return Scene(scene.background, rest)
    elif name == "resize":
        nr = o.r + (2 if a % 2 == 0 else -2)
        if nr < 2 or nr > 6:
            return None
        o = replace(o, r=nr)
        if not _fits(o, rest, size):
            return None
        if tex_rng is not None:
            o.tex = _random_tex(tex_rng)
    return Scene(scene.background, rest[:idx] + [o] + rest[idx:])


def random_instruction(rng: np.random.Generator, scene: Scene, size: int = IMAGE, keep_prob: float = 0.0,
                       op_weights: tuple[float, ...] | None = None) -> tuple[int, ...]:
    """A random instruction that is valid for ``scene`` (``keep`` with probability ``keep_prob``).

    ``op_weights`` (one per entry of OPS, ``keep`` ignored): the op mix; default uniform. With weights an
    op is retried (new object/arguments) up to 8 times before another op is drawn, so hard-to-place
    edits (move, add) are not under-represented by rejection.
    """
    if rng.random() < keep_prob:
        return (0, 0, 0, 0)
    used = {o.colour for o in scene.objects}
    pw = None
    if op_weights is not None:
        pw = np.asarray(op_weights[1:], dtype=np.float64)
        pw = pw / pw.sum()
    op = 0
    for i in range(50):
        if pw is None:
            op = int(rng.integers(1, len(OPS)))
        elif i % 8 == 0:
            op = 1 + int(rng.choice(len(pw), p=pw))
        name = OPS[op]
        if name == "add":
            free = [c for c in range(len(PALETTE)) if c not in used]
            if not free:
                continue
            instr = (op, int(rng.choice(free)), int(rng.integers(len(SHAPES))), int(rng.integers(GRID * GRID)))
            if pw is not None:  # weighted mix: pick a cell where the new object fits (few of the 16 do)
                cells = [c for c in rng.permutation(GRID * GRID) if apply_edit(scene, (*instr[:3], int(c)), size) is not None]
                if not cells:
                    continue
                instr = (*instr[:3], int(cells[0]))
        else:
            if not scene.objects:
                continue
            o = scene.objects[int(rng.integers(len(scene.objects)))]
            if name == "recolor":
                free = [c for c in range(len(PALETTE)) if c not in used]
                if not free:
                    continue
                instr = (op, o.colour, int(rng.choice(free)), 0)
            elif name == "move":
                instr = (op, o.colour, int(rng.integers(4)), 0)
            elif name == "resize":
                instr = (op, o.colour, int(rng.integers(2)), 0)
            else:
                instr = (op, o.colour, 0, 0)
        if apply_edit(scene, instr, size) is not None:
            return instr
    return (0, 0, 0, 0)


def describe(instr: tuple[int, ...]) -> str:
    """Human-readable instruction, e.g. ``move red left``."""
    op, c, a, b = instr
    name = OPS[op]
    if name == "keep":
        return "keep"
    if name == "recolor":
        return f"recolor {COLOUR_NAMES[c]} -> {COLOUR_NAMES[a]}"
    if name == "move":
        return f"move {COLOUR_NAMES[c]} {DIR_NAMES[a % 4]}"
    if name == "add":
        return f"add {COLOUR_NAMES[c]} {SHAPES[a % 3]} at cell {b}"
    if name == "resize":
        return f"{'enlarge' if a % 2 == 0 else 'shrink'} {COLOUR_NAMES[c]}"
    return f"remove {COLOUR_NAMES[c]}"


def to_model(img: np.ndarray) -> np.ndarray:
    """[0, 1] image -> model range [-1, 1]."""
    return img * 2.0 - 1.0


def edit_mask(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """(S, S) bool: pixels the edit changes."""
    return np.abs(src - tgt).max(axis=0) > 1e-4


Example = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Session = tuple[np.ndarray, list[tuple[int, ...]], list[np.ndarray], list[np.ndarray]]


def _edit_rng(rng: np.random.Generator, texture: bool, shade: bool) -> tuple[np.random.Generator | None, str]:
    if texture and shade:
        raise ValueError("choose one stochastic edit mode: texture or shade, not both")
    return (rng if texture or shade else None), ("shade" if shade else "texture")


def make_example(rng: np.random.Generator, size: int = IMAGE, keep_prob: float = 0.1, texture: bool = False,
                 op_weights: tuple[float, ...] | None = None, shade: bool = False) -> Example:
    """One training example ``(src, instr, tgt, mask)``; images in [-1, 1] (``texture``/``shade``: stochastic modes)."""
    er, mode = _edit_rng(rng, texture, shade)
    scene = random_scene(rng, size, texture=texture, shade=shade)
    instr = random_instruction(rng, scene, size, keep_prob, op_weights)
    after = apply_edit(scene, instr, size, er, mode)
    assert after is not None
    src, tgt = scene.render(), after.render()
    return to_model(src), np.array(instr, dtype=np.int64), to_model(tgt), edit_mask(src, tgt)


def make_batch(rng: np.random.Generator, n: int, size: int = IMAGE, keep_prob: float = 0.1, texture: bool = False,
               op_weights: tuple[float, ...] | None = None, shade: bool = False) -> tuple[np.ndarray, ...]:
    """``n`` examples stacked: src (n,3,S,S), instr (n,4), tgt (n,3,S,S), mask (n,S,S)."""
    ex = [make_example(rng, size, keep_prob, texture, op_weights, shade) for _ in range(n)]
    return tuple(np.stack([e[i] for e in ex]) for i in range(4))


def make_session(rng: np.random.Generator, rounds: int, size: int = IMAGE, texture: bool = False,
                 shade: bool = False) -> Session:
    """A multi-round editing session on one image: ``(src, instrs, gt_targets, gt_masks)``.

    Each round's instruction is valid for the ground-truth scene after the previous rounds; the
    images are in [-1, 1] and each mask marks the pixels that round's edit changes (``texture``/``shade``:
    stochastic modes).
    """
    er, mode = _edit_rng(rng, texture, shade)
    for _ in range(100):
        scene = random_scene(rng, size, texture=texture, shade=shade)
        instrs, tgts, masks = [], [], []
        cur = scene
        for _r in range(rounds):
            ins = random_instruction(rng, cur, size, 0.0)
            if ins[0] == 0:
                break
            nxt = apply_edit(cur, ins, size, er, mode)
            assert nxt is not None
            a, b = cur.render(), nxt.render()
            instrs.append(ins)
            tgts.append(to_model(b))
            masks.append(edit_mask(a, b))
            cur = nxt
        if len(instrs) == rounds and all(m.mean() <= 0.25 for m in masks):
            return to_model(scene.render()), instrs, tgts, masks
    raise RuntimeError("could not draw a valid editing session")
