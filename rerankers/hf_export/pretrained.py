"""``save_pretrained`` / ``from_pretrained`` of the transformer re-rankers, over the export format of
:mod:`rerankers.hf_export` (description, checksums, head weights, atomic directory)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

from pipeline.core.errors import CheckpointError, PipelineError

from . import (
    CONFIG_FILE, export_class, library_versions, load_weights, read_description, save_weights, write_description,
    write_directory,
)

__all__ = ["PretrainedExport"]



class PretrainedExport:
    """``save_pretrained`` / ``from_pretrained`` of a transformer re-ranker (a mixin of
    :class:`rerankers.transformer_base.TransformerReranker`, which provides ``describe``, ``from_description``,
    ``_build``, ``module``, ``tokenizer`` and ``encoder_description``)."""

    #: the description file of this model's export, and the file of its weights outside the encoder
    #: (``None``: the model has none)
    pretrained_config_file: ClassVar[str] = CONFIG_FILE
    pretrained_head_file: ClassVar[str | None] = None

    def export_description(self) -> dict:
        """What the export's description file records.

        Returns:
            Name, class, configs, seed, the encoder it was trained on (name, architecture, tokenizer
            fingerprint), the head weights' file and versions.
        """
        return {**self.describe(), "head_weights": self.pretrained_head_file, "versions": library_versions()}

    def _export_ready(self) -> None:
        if self.module is None or self.tokenizer is None:
            raise PipelineError(f"{self.name}: nothing to export (not prepared, trained or loaded)")
        self._require_float("export")

    def save_pretrained(self, directory) -> Path:
        """Write the model as a Hugging Face directory (written atomically; an existing ``directory`` is
        replaced as a whole): the encoder with ``save_pretrained`` and its tokenizer (both standard), the
        weights outside the encoder in :attr:`pretrained_head_file` (safetensors) and the description in
        :attr:`pretrained_config_file`. :meth:`from_pretrained` reads it back with identical scores.

        Args:
            directory: the directory to write (replaced as a whole if it exists).

        Returns:
            The directory written.

        Raises:
            PipelineError: nothing to export (not prepared), an int8-quantized model, or weights outside the
                encoder without a head file.

        Example:
            >>> reranker.save_pretrained("exported/addax")  # doctest: +SKIP
        """
        self._export_ready()
        head = {key: value for key, value in self.module.state_dict().items() if not key.startswith("encoder.")}
        if head and self.pretrained_head_file is None:
            raise PipelineError(f"{self.name}: has weights outside its encoder ({', '.join(sorted(head)[:3])}, "
                                f"...) but no file to export them to (pretrained_head_file)")

        def write(target: Path) -> None:
            self.module.encoder.save_pretrained(target)
            self.tokenizer.save_pretrained(target)
            if self.pretrained_head_file is not None:
                save_weights(target / self.pretrained_head_file, head)
            write_description(target, self.pretrained_config_file, self.export_description())

        return write_directory(directory, write)

    @classmethod
    def from_pretrained(cls, directory):
        """The re-ranker that :meth:`save_pretrained` wrote to ``directory`` (an ablation's export read
        through its parent class comes back as that ablation), scoring exactly as it did. A directory that
        is no such export, or one of another model, is a :class:`~pipeline.core.errors.CheckpointError` naming it.

        Args:
            directory: a directory :meth:`save_pretrained` wrote.

        Returns:
            The re-ranker, in eval mode, ready to score.

        Raises:
            CheckpointError: the directory is no such export, or one of another model.

        Example:
            >>> reranker = AddaxReranker.from_pretrained("my-addax")   # doctest: +SKIP
        """
        directory = Path(directory)
        description = read_description(directory, cls.pretrained_config_file)
        return export_class(directory, description, cls)._restore_pretrained(directory, description)

    @classmethod
    def _restore_pretrained(cls, directory: Path, description: Mapping[str, Any],
                            options: Mapping[str, Any] | None = None):
        """Rebuild from an export's ``description``: its configs (``--set``-style ``options`` applied over
        them, ``encoder`` excepted) on the directory's encoder, then the head."""
        from pipeline.core.options import apply_overrides

        reranker = cls.from_description(directory / cls.pretrained_config_file, description)
        if options:
            apply_overrides(reranker.option_configs(), options)
        # the exported (fine-tuned) encoder, not the original
        reranker.encoder_config.encoder = str(directory.resolve())
        reranker._before_restore(directory, description)
        try:
            reranker._build()
        except PipelineError as error:
            raise CheckpointError(f"{directory}: cannot rebuild {cls.name} on its encoder ({error})") from None
        saved = (description.get("encoder") or {}).get("tokenizer")
        found = reranker.encoder_description["tokenizer"]
        if saved and saved != found:
            raise CheckpointError(f"{directory}: its tokenizer files are not the ones the model was exported with "
                                  f"(vocabulary fingerprint saved {saved!r}, found {found!r})")
        reranker._restore_head(directory, description)
        reranker.module.eval()
        reranker.clear_cache()
        return reranker

    def _before_restore(self, directory: Path, description: Mapping[str, Any]) -> None:
        """Hook run before an export's module is built (the cross-encoder picks its head kind here)."""

    def _restore_head(self, directory: Path, description: Mapping[str, Any]) -> None:
        """Load the weights outside the encoder from :attr:`pretrained_head_file`; they must be exactly the
        module's own (names and shapes), else a :class:`~pipeline.core.errors.CheckpointError`."""
        expected = {key for key in self.module.state_dict() if not key.startswith("encoder.")}
        if self.pretrained_head_file is None:
            if expected:
                raise CheckpointError(f"{directory}: {self.name} has weights outside its encoder but no head file")
            return
        where = directory / self.pretrained_head_file
        state = load_weights(where)
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise CheckpointError(f"{where}: weights do not fit {self.name} with the saved config (missing "
                                  f"{missing[:5]}, unexpected {extra[:5]})")
        try:
            self.module.load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise CheckpointError(f"{where}: weights do not fit {self.name} with the saved config ({error})") from None
