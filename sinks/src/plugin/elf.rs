//! The check a plugin file passes before it is `dlopen`ed: it is an ELF
//! shared object for this machine that exports the entry symbol.
//!
//! Loading a library runs its constructors, and a constructor can do
//! anything to the process (the AddressSanitizer runtime, for one, prints
//! a message and exits when it is not loaded first). So a file that is not
//! a spillway plugin must be refused from its bytes alone: the ELF header
//! and the dynamic symbol table are read with `object`, no code of the
//! file runs, and the error says what is missing. A file that passes is a
//! real plugin (or pretends to be one), and from then on its code is the
//! daemon's: docs/plugins.md says so.

use object::elf;
use object::read::elf::{ElfFile, FileHeader, Sym};
use object::{Endian, Endianness, FileKind};
use sink_sdk::abi::ENTRY_SYMBOL;

/// `e_machine` of the code this process runs.
#[cfg(target_arch = "x86_64")]
const THIS_MACHINE: (u16, &str) = (elf::EM_X86_64, "x86-64");
#[cfg(target_arch = "aarch64")]
const THIS_MACHINE: (u16, &str) = (elf::EM_AARCH64, "aarch64");
#[cfg(target_arch = "riscv64")]
const THIS_MACHINE: (u16, &str) = (elf::EM_RISCV, "riscv64");
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
compile_error!("plugin/elf.rs: add this architecture's ELF e_machine");

/// Checks that `bytes` are an ELF shared object of this machine (64-bit,
/// this byte order, this `e_machine`) whose dynamic symbol table defines
/// [`ENTRY_SYMBOL`] as a global function. The error says what is missing
/// (the caller names the path).
pub(crate) fn check_plugin_elf(bytes: &[u8]) -> Result<(), String> {
    match FileKind::parse(bytes) {
        Ok(FileKind::Elf64) => {}
        Ok(FileKind::Elf32) => {
            return Err("is a 32-bit ELF file; this daemon loads 64-bit plugins only".into())
        }
        Ok(other) => return Err(format!("is not an ELF file (it looks like {other:?})")),
        Err(_) => return Err("is not an ELF file (no ELF header)".into()),
    }
    let file = ElfFile::<elf::FileHeader64<Endianness>>::parse(bytes)
        .map_err(|e| format!("is a damaged ELF file: {e}"))?;
    let header = file.elf_header();
    let endian = file.endian();
    if endian.is_little_endian() != cfg!(target_endian = "little") {
        return Err("is an ELF file of the other byte order".into());
    }
    let e_type = header.e_type(endian);
    if e_type != elf::ET_DYN {
        let kind = match e_type {
            elf::ET_REL => "an object file (.o), not a shared object",
            elf::ET_EXEC => "an executable, not a shared object",
            elf::ET_CORE => "a core dump, not a shared object",
            _ => "not a shared object",
        };
        return Err(format!("is {kind} (build the plugin as a `cdylib`)"));
    }
    let (machine, machine_name) = THIS_MACHINE;
    let e_machine = header.e_machine(endian);
    if e_machine != machine {
        return Err(format!(
            "is built for another machine (ELF e_machine {e_machine}, this daemon runs on \
             {machine_name})"
        ));
    }
    exports_entry(&file)
}

/// The entry symbol, defined in the dynamic symbol table (what `dlsym`
/// searches) as a global or weak function.
fn exports_entry(file: &ElfFile<elf::FileHeader64<Endianness>>) -> Result<(), String> {
    let endian = file.endian();
    let symbols = file.elf_dynamic_symbol_table();
    if symbols.is_empty() {
        return Err(format!(
            "is a shared object with no dynamic symbol table, so it cannot export \
             `{ENTRY_SYMBOL}`; is this a spillway sink plugin?"
        ));
    }
    let strings = symbols.strings();
    let mut undefined = false;
    for symbol in symbols.symbols() {
        if symbol.name(endian, strings) != Ok(ENTRY_SYMBOL.as_bytes()) {
            continue;
        }
        let bind = symbol.st_bind();
        let exported = symbol.st_shndx(endian) != elf::SHN_UNDEF
            && symbol.st_type() == elf::STT_FUNC
            && (bind == elf::STB_GLOBAL || bind == elf::STB_WEAK);
        if exported {
            return Ok(());
        }
        undefined = true;
    }
    let why = if undefined {
        "names it but does not define it as an exported function"
    } else {
        "does not export it"
    };
    Err(format!(
        "is a shared object without the spillway entry symbol `{ENTRY_SYMBOL}` (it {why}); a \
         sink plugin exports it with `sink_sdk::export_sink!(YourSink);` (is this a spillway \
         sink plugin?)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_truncated_headers_are_not_elf() {
        assert!(check_plugin_elf(b"")
            .unwrap_err()
            .contains("not an ELF file"));
        assert!(check_plugin_elf(b"#!/bin/sh\necho hi\n")
            .unwrap_err()
            .contains("not an ELF file"));
        let err = check_plugin_elf(b"\x7fELF\x02\x01\x01").unwrap_err();
        assert!(err.contains("ELF"), "{err}");
    }

    #[test]
    fn the_running_executable_is_not_a_shared_object_or_has_no_entry() {
        // The test binary is a PIE (ET_DYN on Debian) or an executable;
        // either way it is refused, and never loaded.
        let bytes = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let err = check_plugin_elf(&bytes).unwrap_err();
        assert!(
            err.contains(ENTRY_SYMBOL) || err.contains("not a shared object"),
            "{err}"
        );
    }
}
