"""Programs: the ISA spec, command encoding, blob container, text assembly."""

from .codec import Command, EncodeError, decode, decode_one, encode, encode_all
from .spec import CommandSpec, FieldSpec, IsaSpec, load_isa

__all__ = ["Command", "EncodeError", "decode", "decode_one", "encode", "encode_all",
           "CommandSpec", "FieldSpec", "IsaSpec", "load_isa"]
