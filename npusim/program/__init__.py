"""Programs: the ISA spec, command encoding, blob container, text assembly, verifier."""

from .asm import assemble, disassemble
from .blob import BlobHeader, encode_blob, load_blob, read_header
from .codec import Command, EncodeError, decode, decode_one, encode, encode_all
from .model import Buffer, Constant, Header, Program
from .relocate import address_fields, address_step, relocate
from .spec import CommandSpec, FieldSpec, IsaSpec, load_isa
from .verify import verify

__all__ = ["Command", "EncodeError", "decode", "decode_one", "encode", "encode_all",
           "CommandSpec", "FieldSpec", "IsaSpec", "load_isa",
           "Buffer", "Constant", "Header", "Program",
           "BlobHeader", "encode_blob", "load_blob", "read_header", "assemble", "disassemble", "verify",
           "relocate", "address_fields", "address_step"]
