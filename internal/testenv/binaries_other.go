//go:build !unix

package testenv

import "errors"

var errNoThrowaway = errors.New("throwaway servers are only started on Unix systems")

func startPostgresBinaries() (running, error) { return running{}, errNoThrowaway }

func startThrowawayPostgres(...string) (running, error) { return running{}, errNoThrowaway }

func startRedisBinary() (running, error) { return running{}, errNoThrowaway }
