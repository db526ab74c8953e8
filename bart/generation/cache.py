"""The decoder's caches for incremental decoding, and the boolean attention mask they are read with.

The model (:mod:`bart.modeling.modeling_bart`) writes and reads them; the searches
(:mod:`bart.generation.session`, :mod:`bart.generation.compiled`) allocate and reorder them. They live
here, below both, so that the model can import generation (``generate``) and generation never imports
the model.
"""
from __future__ import annotations

import torch


def padding_mask_to_bool(mask: torch.Tensor) -> torch.Tensor:
    """(B, S) 1/0 padding mask → (B, 1, 1, S) boolean SDPA mask (True = attend).

    Boolean masks work under autocast whatever the query dtype is."""
    return mask[:, None, None, :].to(torch.bool)


class StaticCache:
    """The decoder's KV cache for incremental decoding, allocated once per ``generate`` call.

    Self-attention keys and values live in one preallocated buffer (layers, 2, rows, H, max_length,
    Dh): a step writes its position in place (no ``torch.cat`` growth, no allocation per step) and
    attends over a view of the filled positions. Cross-attention keys and values are projected once
    per source (not per beam; the decoder folds beams into the query length) and stay as they are.

    ``reorder(rows)`` (beam search): eager decoding (``mapped``) reorders in place, copying only the histories a
    step must (a parent's further children into the slots of parents that have none); the compiled step, or a
    change in row count, gathers the filled positions of the chosen rows with one ``index_select(out=)`` into a
    second buffer of the same shape and swaps the two. The cache never reallocates. ``keep_sources(sources, rows)`` drops finished sources
    (their cross K/V are compacted in place, the self K/V with the reorder) so that finished rows
    stop costing work. Only the live rows ``[:rows]`` and positions ``[:length]`` are ever read.

    For a captured decode step (CUDA graphs) the buffers have fixed addresses; a capture would
    write at a device-side position and attend over all ``max_length`` positions with a mask, one
    graph per buffer of the pair. Nothing here is CUDA-specific.
    """

    def __init__(self, num_layers: int, rows: int, heads: int, head_dim: int, max_length: int,
                 cross_kv: list[tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype, device) -> None:
        self.shape = (num_layers, 2, rows, heads, max_length, head_dim)
        self.dtype, self.device = dtype, device
        self.buffer = torch.empty(self.shape, dtype=dtype, device=device)
        self.spare: torch.Tensor | None = None  # the second buffer, made at the first reorder
        self.cross = list(cross_kv)
        self.rows, self.sources, self.length = rows, cross_kv[0][0].shape[0], 0
        self.max_length = max_length
        # beam search on the eager decoder: rows may live in other slots of the buffer than their index
        # (``slots``: logical row -> buffer row, None: the same), so that a reorder moves only what it must
        self.mapped = False
        self.slots: torch.Tensor | None = None
        self.moved_rows = 0  # rows whose history a reorder copied (all live rows each time when not mapped)

    def layer(self, index: int) -> StaticLayerCache:
        return StaticLayerCache(self, index)

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``key``/``value`` (rows, H, q, Dh) at positions [length, length + q); return the
        keys/values of positions [0, length + q) of the live rows (views of the buffer)."""
        rows, end = key.shape[0], self.length + key.shape[2]
        if end > self.max_length:
            raise ValueError(f"StaticCache holds {self.max_length} positions, step needs {end}")
        if rows != self.rows:
            raise ValueError(f"StaticCache has {self.rows} live rows, the step has {rows}")
        kv = self.buffer[layer, :, :rows]
        kv[0, :, :, self.length:end].copy_(key)
        kv[1, :, :, self.length:end].copy_(value)
        return kv[0, :, :, :end], kv[1, :, :, :end]

    def order(self) -> torch.Tensor | None:
        """The logical row held by each buffer row (the decoder runs its rows in this order), None: the same."""
        return None if self.slots is None else torch.argsort(self.slots)

    def reorder(self, rows: torch.Tensor) -> None:
        """The live rows become ``rows`` (indices into the current live rows; fewer when sources left).

        Mapped (``mapped``, the same number of rows): no row is moved that need not be. Each parent row's
        history stays in its slot for its first child; only a parent's further children are copied, into
        the slots of parents without children (same source: rows are source-major, so the k-th such child
        and the k-th free slot are of the same source). A beam step copies rows - distinct parents
        histories instead of all rows' (the whole cache, every step)."""
        if self.mapped and rows.shape[0] == self.rows and self.length:
            self._reorder_mapped(rows)
            return
        if self.slots is not None:  # back to buffer row = logical row
            rows, self.slots = self.slots[rows], None
        self._reorder(rows)

    def _reorder_mapped(self, rows: torch.Tensor) -> None:
        count = rows.shape[0]
        every = torch.arange(count, device=rows.device)
        slots = every if self.slots is None else self.slots
        source = slots[rows]  # the slot holding each new row's history
        first = torch.full_like(rows, count).scatter_reduce_(0, rows, every, reduce="amin")
        movers = (first[rows] != every).nonzero().squeeze(1)  # later children of a parent
        has_child = torch.zeros(count, dtype=torch.bool, device=rows.device).scatter_(0, rows, True)
        free = slots[~has_child]  # as many as movers, source by source
        if movers.numel():
            filled = self.buffer[:, :, :, :, :self.length]
            filled.index_copy_(2, free, filled.index_select(2, source[movers]))
            source = source.index_copy(0, movers, free)
        self.moved_rows += int(movers.numel())
        self.slots = source

    def _reorder(self, rows: torch.Tensor) -> None:
        if self.spare is None:
            self.spare = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        count = rows.shape[0]
        if self.length:
            torch.index_select(self.buffer[:, :, :self.rows, :, :self.length], 2, rows,
                               out=self.spare[:, :, :count, :, :self.length])
        self.buffer, self.spare = self.spare, self.buffer
        self.rows = count
        self.moved_rows += count if self.length else 0

    def keep_sources(self, sources: list[int], rows: torch.Tensor) -> None:
        """Only ``sources`` (increasing indices into the live sources) stay; ``rows`` are the decoder
        rows that stay (indices into the live rows, in their new order)."""
        for key, value in self.cross:  # in place: row i takes row sources[i] >= i
            for i, source in enumerate(sources):
                if source != i:
                    key[i].copy_(key[source])
                    value[i].copy_(value[source])
        self.cross = [(key[:len(sources)], value[:len(sources)]) for key, value in self.cross]
        self.sources = len(sources)
        self.reorder(rows)


class StaticLayerCache:
    """One decoder layer's view of a :class:`StaticCache`."""

    def __init__(self, cache: StaticCache, index: int) -> None:
        self.cache, self.index = cache, index

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache.write(self.index, key, value)

    @property
    def cross(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache.cross[self.index]
