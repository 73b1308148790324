"""Domain decomposition of the tiled lattice over MPI ranks (CPU now, GPU-ready interfaces).

Design (issue 8; see also ``papers/multi-gpu-porous-media.txt``):

1. :mod:`.decomposition` — the non-empty tiles are cut into slabs of whole tile layers along
   one axis, balanced by the number of non-empty tiles per layer (not by volume).
2. :mod:`.halo` — each rank holds its owned tiles plus one layer of halo tiles (those its nodes
   pull from, periodic wrap included), all in GLOBAL coordinates; the halo plan lists exactly
   the populations that cross a slab face (``c_i`` pointing across it) from the node layer next
   to it, in an order both ends agree on without communication.
3. :mod:`.stepper` — a rank steps boundary tiles first, then interior tiles; backends plug in
   with a ``phase_stepper`` (NumPy: subsets of its pull table; CuPy: tile-range launches on
   two streams).
4. :mod:`.exchange` — the per-step exchange behind ``post/start/progress/finish``:
   non-blocking ``Isend``/``Irecv`` of contiguous host buffers that the stepper packs (NumPy
   arrays; page-locked staging buffers for the CuPy backend), or device buffers sent by NCCL
   on the GPU's halo stream without a host wait; :mod:`.transport` chooses between them
   (``auto`` | ``nccl`` | ``host``, collectively).
5. :mod:`.rank` — :class:`RankSolver` composes one rank's ``Problem`` (``owned`` mask) with a
   backend, stepper and exchange; :func:`step_together` runs several ranks in one process.
6. :mod:`.backend` / :mod:`.launch` — :class:`DistributedBackend` implements the Backend
   protocol: rank 0 runs an ordinary ``Simulation`` on it (moments, cut nodes and probes
   reduced on the ranks and gathered to rank 0; checkpoints written by every rank as its own
   part beside a manifest, :mod:`solver.checkpoint_parts`, resumable on any number of ranks)
   while the other ranks serve, each built from the part of the problem rank 0 sends it
   (:mod:`.slab_parts`).
7. :mod:`.replay` — with the NCCL transport nothing in a step waits on the host, so long runs
   can replay a captured multi-step CUDA graph (both streams and the NCCL calls) instead of
   launching every kernel from Python (opt-in: ``graphs=True``); :func:`~.replay.plan_steps`
   keeps the step count and the copies right.
8. :mod:`.openings` — driven openings: each link on the rank that owns its node's tile, the
   outflow donors another rank holds carried by the halo plan, the per-link flux gathered in
   global link order (flow rates, mass balance: bit for bit those of one process).

What runs as on one device: driven openings, wall shear stress and the other fields (rank 0),
checkpoints and resume, the run monitor, permeability runs (each sample split over the ranks),
compact storage (the plan decides tiled or compact once for all ranks; a compact rank steps
tile ranges of its CompactRun), float16 storage (tiled or compact), and in-place streaming on
the GPU (one copy, AA pattern, tiled or compact; with driven openings on the tiled storage):
its exchange alternates between the halo plan and its reverse with the phase
(:func:`.halo.in_place_plans`), each carrying the openings' reads of the phase that follows.
Results equal one process bit for bit on NumPy and on one GPU,
except float16 storage: its stochastic rounding keys a node's random bits by its rank-local
number, so ranks agree with one process to float16 rounding only (each node's rounding stays
unbiased).

9. :mod:`.local_setup`, :mod:`.reductions`, :mod:`.mirrored` — an image too large for one
   process: the ranks summarise it together (non-empty tiles and fluid nodes per tile layer),
   each reads and tiles only its slab and halo layers, and checks reduce on the ranks
   (``mpirun -n N python -m solver.distributed.mirrored SAMPLE.npy``: mirrored permeability).

Entry point until ``python -m solver run`` drives it: ``mpirun -n N python -m solver.distributed
GEOMETRY.npy --steps 100 --backend numpy`` (see :mod:`solver.distributed.__main__`).
"""

from .backend import DistributedBackend, DistributedState
from .comm import bind_local_gpu, launched_size, mpi_available, rotated_gpus, visible_gpus, world
from .decomposition import SlabDecomposition, decompose
from .exchange import HaloBuffers, HaloExchange, LoopbackHub, MpiExchange, NcclExchange
from .halo import HaloPlan, RankLayout, build_rank, crossing_directions
from .launch import launch
from .rank import RankSolver, step_together
from .stepper import NumpyPhases, RankStepper
from .transport import TransportReport, check_transport, choose_transport

__all__ = [
    "DistributedBackend", "DistributedState", "bind_local_gpu", "launched_size", "mpi_available",
    "world", "visible_gpus", "rotated_gpus",
    "SlabDecomposition", "decompose", "HaloBuffers", "HaloExchange", "LoopbackHub", "MpiExchange",
    "NcclExchange", "TransportReport", "check_transport", "choose_transport",
    "HaloPlan",
    "RankLayout", "build_rank", "crossing_directions", "launch", "RankSolver", "step_together",
    "NumpyPhases", "RankStepper",
]
