package web

import "errors"

// ErrorRow is one row of a service's error table: the domain's errors
// become what a client sees in one ordered list per service, and the
// first row whose Answer matches (ok) answers. S is what an answer may
// read of the request (the fiber context, or a scope of the ids and
// limits the route knows). A nil answer with ok leaves the error to
// ErrorHandler (an error that is never a client's).
type ErrorRow[S any] struct {
	Answer func(s S, err error) (we *Error, ok bool)
	Sample error  // an error the row matches (tests)
	Fixed  *Error // status, code and message of a sentinel's row, when fixed
}

// AnswerError goes down rows and returns the first row's answer for err.
func AnswerError[S any](rows []ErrorRow[S], s S, err error) (*Error, bool) {
	for _, row := range rows {
		if we, ok := row.Answer(s, err); ok {
			return we, true
		}
	}
	return nil, false
}

// ErrorAs is the row of errors of type *T, answered from what they carry.
func ErrorAs[T any, S any, E interface {
	*T
	error
}](answer func(s S, e E) *Error) ErrorRow[S] {
	return ErrorRow[S]{Sample: E(new(T)), Answer: func(s S, err error) (*Error, bool) {
		var e E
		if !errors.As(err, &e) {
			return nil, false
		}
		return answer(s, e), true
	}}
}

// ErrorInternal is the row of an error that is never a client's answer.
func ErrorInternal[S any](target error) ErrorRow[S] {
	return ErrorRow[S]{Sample: target, Answer: func(_ S, err error) (*Error, bool) {
		return nil, errors.Is(err, target)
	}}
}

// ErrorInternalType is the row of an error type that is never a client's
// answer.
func ErrorInternalType[T any, S any, E interface {
	*T
	error
}]() ErrorRow[S] {
	return ErrorRow[S]{Sample: E(new(T)), Answer: func(_ S, err error) (*Error, bool) {
		var e E
		return nil, errors.As(err, &e)
	}}
}
