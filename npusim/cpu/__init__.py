"""The host CPU (Cortex-M55) of software epochs: operator values and their cost.

`run_operator(record, inputs, out_types)` computes one ONNX operator of a HOST command (a host
operator record, `program.hostop`) on numpy arrays in the operator's element types; `cost`
times it with the profile's [host] model. The engine (`engine/host.py`) moves the operands
between simulated memory and these arrays through the access checks.
"""

from .cost import cost_class, host_cycles, work
from .execute import HostOpError, HostOpUnsupported, run_operator

__all__ = ["run_operator", "HostOpError", "HostOpUnsupported", "host_cycles", "cost_class", "work"]
